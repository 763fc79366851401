// Row-wise softmax of the logits, [rows, classes] -> probabilities. Subtracts the row maximum
// first so large logits cannot overflow exp.

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
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let row = gid.x;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.classes;
    var mx = logits[base];
    for (var i = 1u; i < p.classes; i++) {
        mx = max(mx, logits[base + i]);
    }
    var sum = 0.0;
    for (var i = 0u; i < p.classes; i++) {
        sum += exp(logits[base + i] - mx);
    }
    for (var i = 0u; i < p.classes; i++) {
        probs[base + i] = exp(logits[base + i] - mx) / sum;
    }
}
