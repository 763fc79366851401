// GEMM for real GPUs: shared-memory tiling with a register block per invocation. A workgroup
// of (TN/RN) x (TM/RM) invocations computes a TM x TN tile of C; each invocation keeps an
// RM x RN block in registers (RN/4 vec4 columns per row). Per step of BK values of k, the
// TM x BK tile of A and the BK x TN tile of B are staged in workgroup memory, stored as vec4
// so that the inner loop reads four rows (or columns) per load.
//
// Double-buffered: two stages of workgroup memory. While the invocations multiply the tiles in
// one stage they have already fetched the next tiles from global memory into registers; those
// go to the other stage after the multiply, so one barrier per k step suffices (the classic
// register prefetch; global latency overlaps the FMAs).
//
// An invocation's rows are 4-row groups spread over the tile (group g holds rows
// 4 * (g * WY + ty) ..+4), and likewise its columns, so neighbouring invocations read
// neighbouring vec4s of workgroup memory and write neighbouring columns of C. Global loads are
// ordered so that consecutive invocations read consecutive addresses whatever the operand's
// layout (A, A_TRANS, B, B_TRANS, the implicit im2col of A_CONV). Operands are arbitrary
// strided views: where the contiguous dimension is a multiple of 4 they are read in runs of 4
// (A_VEC, B_VEC), as one vec4 where offset and strides are multiples of 4 too (A_VEC4,
// B_VEC4), else value by value.
//
// Workgroup memory is swizzled: in row kk of a stage, the tile's vec4 column c is stored at
// column c ^ (kk % T4), T4 being the row's vec4 count (TM4 or TN4, powers of two). Where
// consecutive invocations fetch along k (row-major A, B_TRANS: the `linear` layout's both
// operands) they store to one column of consecutive rows, which without it all fall in one
// bank (rows are 32 to 128 floats apart): an 8- or 16-way conflict on every staging store. With
// it they spread over the banks; the inner loop's reads, all of one row kk, are only permuted.
//
// Tile shapes are defines (the Rust side names four: tiled 64x64/4x4, tiled128 128x128/8x8,
// tiled32 32x32/4x4 for small GEMMs that must still fill a large GPU, each within WebGPU's
// default limits of 256 invocations and 16 KiB of workgroup memory, and tiled128k16, tiled128
// with BK = 16: 32 KiB, where the adapter has it).

const TM: u32 = {{TM}}u;
const TN: u32 = {{TN}}u;
const RM: u32 = {{RM}}u;
const RN: u32 = {{RN}}u;
const BK: u32 = {{BK}}u;
const WX: u32 = TN / RN;            // invocations along n
const WY: u32 = TM / RM;            // invocations along m
const NT: u32 = WX * WY;
const LA: u32 = TM * BK / NT;       // A values each invocation fetches per k step
const LB: u32 = TN * BK / NT;
const TM4: u32 = TM / 4u;
const TN4: u32 = TN / 4u;
const GM: u32 = RM / 4u;            // 4-row groups per invocation
const GN: u32 = RN / 4u;            // vec4 columns per invocation

// [stage][kk][m / 4] and [stage][kk][n / 4].
var<workgroup> ta: array<vec4<f32>, {{TA_VEC4}}>;
var<workgroup> tb: array<vec4<f32>, {{TB_VEC4}}>;

// (a_slot, b_slot: gemm_tile_slots.wgsl.)

// The tiles at k0 this invocation fetches from global memory (zero outside A and B), held in
// registers until they are staged. Under A_VEC (B_VEC) the operand's contiguous dimension (k
// for row-major A and B_TRANS, m for A_TRANS, n for row-major B) is a multiple of 4, and so
// are TM, TN, BK and split-K's k ranges: its runs of 4 along that dimension are wholly inside
// or wholly outside, and each invocation fetches LA / 4 whole runs, one address and one bounds
// check for four values (`a_run`, `a_run_load`, `A_STEP` and B's: gemm_tile_slots.wgsl), one
// vector load under A_VEC4 / B_VEC4. (A's
// and B's loops are written out twice: a WGSL function cannot take a storage array.)
var<private> ra: array<f32, LA>;
var<private> rb: array<f32, LB>;

fn fetch(bt: u32, m0: u32, n0: u32, k0: u32, k_end: u32, tid: u32) {
#if A_VEC
    for (var i = 0u; i < LA / 4u; i++) {
        let v = a_run_load(bt, m0, k0, k_end, a_run(tid + i * NT));
        for (var j = 0u; j < 4u; j++) {
            ra[i * 4u + j] = v[j];
        }
    }
#else
    for (var i = 0u; i < LA; i++) {
        let s = a_slot(tid + i * NT);
        let m = m0 + s.y;
        let k = k0 + s.x;
        ra[i] = select(0.0, load_a(bt, min(m, p.m - 1u), min(k, p.k - 1u)), m < p.m && k < k_end);
    }
#endif
#if B_VEC
    for (var i = 0u; i < LB / 4u; i++) {
        let v = b_run_load(bt, k0, n0, k_end, b_run(tid + i * NT));
        for (var j = 0u; j < 4u; j++) {
            rb[i * 4u + j] = v[j];
        }
    }
#else
    for (var i = 0u; i < LB; i++) {
        let s = b_slot(tid + i * NT);
        let n = n0 + s.y;
        let k = k0 + s.x;
        rb[i] = select(0.0, load_b(bt, min(k, p.k - 1u), min(n, p.n - 1u)), n < p.n && k < k_end);
    }
#endif
}

// Where value (kk, mm) of the A tile (or (kk, nn) of B's) goes in workgroup-memory stage
// `stage`: the vec4 and the lane, swizzled (see the top).
fn ta_put(stage: u32, kk: u32, mm: u32, v: f32) {
    ta[(stage * BK + kk) * TM4 + ((mm / 4u) ^ (kk % TM4))][mm % 4u] = v;
}

fn tb_put(stage: u32, kk: u32, nn: u32, v: f32) {
    tb[(stage * BK + kk) * TN4 + ((nn / 4u) ^ (kk % TN4))][nn % 4u] = v;
}

// Stores the fetched tiles into workgroup-memory stage `stage`.
fn stage_tiles(stage: u32, tid: u32) {
#if A_VEC
    for (var i = 0u; i < LA / 4u; i++) {
        let s = a_run(tid + i * NT);
        for (var j = 0u; j < 4u; j++) {
            let e = s + j * A_STEP;
            ta_put(stage, e.x, e.y, ra[i * 4u + j]);
        }
    }
#else
    for (var i = 0u; i < LA; i++) {
        let s = a_slot(tid + i * NT);
        ta_put(stage, s.x, s.y, ra[i]);
    }
#endif
#if B_VEC
    for (var i = 0u; i < LB / 4u; i++) {
        let s = b_run(tid + i * NT);
        for (var j = 0u; j < 4u; j++) {
            let e = s + j * B_STEP;
            tb_put(stage, e.x, e.y, rb[i * 4u + j]);
        }
    }
#else
    for (var i = 0u; i < LB; i++) {
        let s = b_slot(tid + i * NT);
        tb_put(stage, s.x, s.y, rb[i]);
    }
#endif
}

@compute @workgroup_size({{WX}}, {{WY}})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let m0 = wg.y * TM;
    let n0 = wg.x * TN;
    let tid = lid.y * WX + lid.x;
    var acc: array<vec4<f32>, {{ACC_VEC4}}>; // [RM][GN]

#if SPLIT_K
    // Workgroup z = image * splits + part; part covers a whole number of k steps.
    let bt = wg.z / p.splits;
    let part = wg.z % p.splits;
    let span = ((p.k + p.splits - 1u) / p.splits + BK - 1u) / BK * BK;
    var k0 = min(part * span, p.k);
    let k_end = min(k0 + span, p.k);
#else
    let bt = wg.z;
    var k0 = 0u;
    let k_end = p.k;
#endif
    var stage = 0u;
    fetch(bt, m0, n0, k0, k_end, tid);
    stage_tiles(stage, tid);
    workgroupBarrier();

    loop {
        let next = k0 + BK;
        let more = next < k_end;
        if (more) {
            fetch(bt, m0, n0, next, k_end, tid);
        }

        for (var kk = 0u; kk < BK; kk++) {
            let abase = (stage * BK + kk) * TM4;
            let bbase = (stage * BK + kk) * TN4;
            let aswz = kk % TM4;
            let bswz = kk % TN4;
            var bv: array<vec4<f32>, GN>;
            for (var h = 0u; h < GN; h++) {
                bv[h] = tb[bbase + ((h * WX + lid.x) ^ bswz)];
            }
            for (var g = 0u; g < GM; g++) {
                let av = ta[abase + ((g * WY + lid.y) ^ aswz)];
                for (var i = 0u; i < 4u; i++) {
                    let r = (g * 4u + i) * GN;
                    for (var h = 0u; h < GN; h++) {
                        acc[r + h] = fma(vec4<f32>(av[i]), bv[h], acc[r + h]);
                    }
                }
            }
        }

        if (!more) {
            break;
        }
        stage = 1u - stage;
        stage_tiles(stage, tid);
        workgroupBarrier();
        k0 = next;
    }

    for (var g = 0u; g < GM; g++) {
        for (var i = 0u; i < 4u; i++) {
            let m = m0 + (g * WY + lid.y) * 4u + i;
            for (var h = 0u; h < GN; h++) {
                let v = acc[(g * 4u + i) * GN + h];
                let n = n0 + (h * WX + lid.x) * 4u;
                if (m < p.m) {
                    for (var j = 0u; j < 4u; j++) {
                        if (n + j < p.n) {
#if SPLIT_K
                            c[((part * p.batch + bt) * p.m + m) * p.n + n + j] = v[j];
#else
                            store_c(bt, m, n + j, v[j]);
#endif
                        }
                    }
                }
            }
        }
    }
}
