// Row-wise softmax of the logits, [rows, classes] -> probabilities. Subtracts the row maximum
// first so large logits cannot overflow exp.
// Rows are covered as layernorm.wgsl covers them (`RowKernel`): ROW_WORKGROUP (real GPUs) gives
// each row a workgroup whose 64 invocations stride the classes together (ImageNet's 1,000 at
// batch 1 are one workgroup's 16 steps, not one invocation's 3,000); otherwise one invocation
// per row, without barriers (CPU rasterisers). LANES, row_index, row_max, row_sum: row_common.wgsl.

struct Params {
    rows: u32,
    classes: u32,
    _p0: u32,
    _p1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> probs: array<f32>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    ids: RowLanes,
) {
    let row = row_index(wid, nwg, ids.lid);
    let lane = row_lane(ids);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.classes;
    // A lane with no class of its own (classes < 64) contributes the identity of each reduction.
    var mx = bitcast<f32>(0xff7fffffu); // -f32::MAX
    for (var i = lane; i < p.classes; i += LANES) {
        mx = max(mx, logits[base + i]);
    }
    mx = row_max(lane, mx);
    var sum = 0.0;
    for (var i = lane; i < p.classes; i += LANES) {
        sum += exp(logits[base + i] - mx);
    }
    sum = row_sum(lane, sum);
    for (var i = lane; i < p.classes; i += LANES) {
        probs[base + i] = exp(logits[base + i] - mx) / sum;
    }
}
