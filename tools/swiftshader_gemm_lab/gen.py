"""Writes GEMM kernel variants as JSON for lab.mjs (see there); SHAPE=MxKxN sets the grid."""
import json, sys
import os
M, K, N = map(int, os.environ.get('SHAPE', '196x512x2048').split('x'))
HDR = """struct P { m: u32, n: u32, k: u32, _p: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(5) var<storage, read_write> c: array<f32>;
"""
SIG = "@compute @workgroup_size({L})\nfn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lane: u32) {{"
def ceil(x, y): return (x + y - 1) // y

def prologue(R, C, L, cols, zero, hdr=HDR):
    """Header, entry point, the R clamped A-row offsets, the C column lines and R*C zeroed accumulators."""
    s = [hdr, SIG.format(L=L), f"  let m0 = wg.y * {R}u; {cols[0]}"]
    s += [f"  let ra{r} = min(m0 + {r}u, p.m - 1u) * p.k;" for r in range(R)]
    s += cols[1:]
    s += [f"  var acc{r}_{j} = {zero};" for r in range(R) for j in range(C)]
    return s

def loops(R, C, L):
    return HDR + f"""
const ROWS: u32 = {R}u; const COLS: u32 = {C}u; const LANES: u32 = {L}u;
@compute @workgroup_size({L})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lane: u32) {{
    let m0 = wg.y * ROWS;
    let n0 = wg.x * (LANES * COLS) + lane;
    var rows: array<u32, ROWS>;
    for (var r = 0u; r < ROWS; r++) {{ rows[r] = min(m0 + r, p.m - 1u); }}
    var cols: array<u32, COLS>;
    for (var j = 0u; j < COLS; j++) {{ cols[j] = min(n0 + j * LANES, p.n - 1u); }}
    var acc: array<array<f32, COLS>, ROWS>;
    for (var k = 0u; k < p.k; k++) {{
        var bv: array<f32, COLS>;
        for (var j = 0u; j < COLS; j++) {{ bv[j] = b[cols[j] * p.k + k]; }}
        for (var r = 0u; r < ROWS; r++) {{
            let av = a[rows[r] * p.k + k];
            for (var j = 0u; j < COLS; j++) {{ acc[r][j] = fma(av, bv[j], acc[r][j]); }}
        }}
    }}
    for (var r = 0u; r < ROWS; r++) {{ for (var j = 0u; j < COLS; j++) {{
        let m = m0 + r; let n = n0 + j * LANES;
        if (m < p.m && n < p.n) {{ c[m * p.n + n] = acc[r][j]; }} }} }}
}}
""", [ceil(N, L * C), ceil(M, R), 1]

def unrolled(R, C, L, wt=False, kstep=1):
    scale = "" if wt else " * p.k"
    s = prologue(R, C, L, [f"let n0 = wg.x * {L*C}u + lane;"] + [f"  let cb{j} = min(n0 + {j*L}u, p.n - 1u){scale};" for j in range(C)], "0.0")
    s.append(f"  for (var k = 0u; k < p.k; k += {kstep}u) {{")
    for kk in range(kstep):
        for j in range(C):
            if wt: s.append(f"    let b{j}_{kk} = b[(k + {kk}u) * p.n + cb{j}];")
            else: s.append(f"    let b{j}_{kk} = b[cb{j} + k + {kk}u];")
        for r in range(R):
            s.append(f"    let a{r}_{kk} = a[ra{r} + k + {kk}u];")
            for j in range(C): s.append(f"    acc{r}_{j} = fma(a{r}_{kk}, b{j}_{kk}, acc{r}_{j});")
    s.append("  }")
    for r in range(R):
        for j in range(C):
            s.append(f"  if (m0 + {r}u < p.m && n0 + {j*L}u < p.n) {{ c[(m0 + {r}u) * p.n + n0 + {j*L}u] = acc{r}_{j}; }}")
    s.append("}")
    return "\n".join(s), [ceil(N, L * C), ceil(M, R), 1]

def unrolled_vec4(R, C4, L):
    # B not transposed [K,N] as vec4 along n: lane owns C4 vec4 columns (n0 + j*L*4 .. +3). requires N % 4 == 0
    vec_b = HDR.replace("var<storage, read> b: array<f32>", "var<storage, read> b: array<vec4<f32>>")
    s = prologue(R, C4, L, [f"let q0 = wg.x * {L*C4}u + lane; let nq = p.n / 4u;"] + [f"  let cb{j} = min(q0 + {j*L}u, nq - 1u);" for j in range(C4)], "vec4<f32>(0.0)", vec_b)
    s.append("  for (var k = 0u; k < p.k; k++) {")
    for j in range(C4): s.append(f"    let b{j} = b[k * nq + cb{j}];")
    for r in range(R):
        s.append(f"    let a{r} = a[ra{r} + k];")
        for j in range(C4): s.append(f"    acc{r}_{j} = fma(vec4<f32>(a{r}), b{j}, acc{r}_{j});")
    s.append("  }")
    for r in range(R):
        for j in range(C4):
            s.append(f"  if (m0 + {r}u < p.m && q0 + {j*L}u < nq) {{ let o = (m0 + {r}u) * p.n + (q0 + {j*L}u) * 4u; c[o] = acc{r}_{j}.x; c[o+1u] = acc{r}_{j}.y; c[o+2u] = acc{r}_{j}.z; c[o+3u] = acc{r}_{j}.w; }}")
    s.append("}")
    return "\n".join(s), [ceil(N // 4, L * C4), ceil(M, R), 1]

ks = []
def add(name, cg, wt=False):
    code, grid = cg
    ks.append({"name": name, "code": code, "grid": grid, "wt": wt})
which = sys.argv[1:]
for w in which:
    kind, *args = w.split(":")
    if kind == "loops": add(w, loops(*map(int, args)))
    if kind == "unr": add(w, unrolled(*map(int, args)))
    if kind == "unrwt": add(w, unrolled(*map(int, args[:3]), wt=True), wt=True)
    if kind == "unrk": add(w, unrolled(*map(int, args[:3]), kstep=int(args[3])))
    if kind == "v4": add(w, unrolled_vec4(*map(int, args)), wt=True)
json.dump(ks, sys.stdout)
