// Shared by the row kernels (layernorm.wgsl, softmax.wgsl, groupnorm_chunks.wgsl), concatenated
// in front of each: how many invocations cover a row (or a GroupNorm chunk), and reductions over
// the row whose result every one of them gets. `RowKernel` picks the form per adapter:
// - ROW_WORKGROUP (real GPUs): a workgroup of LANES = 64 per row, striding it together. A
//   reduction publishes each lane's value in workgroup memory (one barrier), every invocation
//   combines all 64 in the same order (broadcast reads), and a second barrier lets the memory be
//   written again: two barriers where a halving tree takes seven. With ROW_SUBGROUP (natively,
//   where the adapter has subgroups) each subgroup combines its lanes first (see below).
// - otherwise (CPU rasterisers, where barriers are dear): one invocation per row, LANES = 1,
//   and a reduction is the value itself.
// A kernel's invocation works on row `row_index(..)`, as lane `row_lane(..)` (0 when it holds
// the row alone), and returns early past the last row: in the workgroup form the whole
// workgroup does, so its barriers stay in uniform control flow. Its entry point takes the
// invocation's ids within the workgroup as a `RowLanes` (the subgroup ones too, under
// ROW_SUBGROUP), and the workgroup's as plain builtins, which uniformity analysis follows.

struct RowLanes {
    @builtin(local_invocation_index) lid: u32,
#if ROW_SUBGROUP
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(num_subgroups) sg_count: u32,
#endif
}

#if ROW_WORKGROUP
const LANES: u32 = 64u;
var<workgroup> row_lanes: array<f32, LANES>;

#if ROW_SUBGROUP
// ROW_SUBGROUP (real GPUs with subgroups, natively): a reduction first combines each
// subgroup's lanes (subgroupAdd, subgroupMax), and only the subgroups' results go through
// workgroup memory (2 values on NVIDIA's 32 lanes, rather than all 64): still two barriers, but
// each invocation reads 64 / subgroup size values where the plain form reads 64. The kernels
// hand over their subgroup builtins first (row_lane); any subgroup size works.
var<private> row_sg: vec3<u32>;  // (lane in its subgroup, subgroup index, subgroups)
#endif

// Publishes this invocation's part of a reduction in workgroup memory and says how many parts
// there are, in row_lanes[0..n], all readable once it returns: each lane's value, or under
// ROW_SUBGROUP each subgroup's, already combined over its lanes.
fn row_publish(lane: u32, part: f32) -> u32 {
#if ROW_SUBGROUP
    if (row_sg.x == 0u) {
        row_lanes[row_sg.y] = part;
    }
    workgroupBarrier();
    return row_sg.z;
#else
    row_lanes[lane] = part;
    workgroupBarrier();
    return LANES;
#endif
}

fn row_sum(lane: u32, v: f32) -> f32 {
#if ROW_SUBGROUP
    let n = row_publish(lane, subgroupAdd(v));
#else
    let n = row_publish(lane, v);
#endif
    var total = 0.0;
    for (var i = 0u; i < n; i++) {
        total += row_lanes[i];
    }
    workgroupBarrier();
    return total;
}

fn row_max(lane: u32, v: f32) -> f32 {
#if ROW_SUBGROUP
    let n = row_publish(lane, subgroupMax(v));
#else
    let n = row_publish(lane, v);
#endif
    var m = row_lanes[0];
    for (var i = 1u; i < n; i++) {
        m = max(m, row_lanes[i]);
    }
    workgroupBarrier();
    return m;
}
#else
const LANES: u32 = 1u;

fn row_sum(lane: u32, v: f32) -> f32 {
    return v;
}

fn row_max(lane: u32, v: f32) -> f32 {
    return v;
}
#endif

// The row a workgroup (ROW_WORKGROUP: from workgroup ids alone, which WGSL's uniformity
// analysis follows through the call) or an invocation works on; rows past one grid dimension
// fold into the second, as `ops::workgroup_grid` and `ops::grid` lay them out.
fn row_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
#if ROW_WORKGROUP
    return wid.x + wid.y * nwg.x;
#else
    return (wid.x + wid.y * nwg.x) * 64u + lid;
#endif
}

// This invocation's lane in its row (0 when it holds the row alone). Under ROW_SUBGROUP also
// keeps its subgroup ids for the reductions: call it before the first one.
fn row_lane(ids: RowLanes) -> u32 {
#if ROW_SUBGROUP
    row_sg = vec3<u32>(ids.sg_lane, ids.sg_id, ids.sg_count);
#endif
    return ids.lid % LANES;
}
