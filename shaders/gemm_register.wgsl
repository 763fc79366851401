// GEMM for CPU rasterisers (lavapipe/llvmpipe, SwiftShader). There a workgroup runs on one
// thread as SIMD lanes, barriers are expensive, and a load whose address is the same for every
// lane is one scalar load plus a broadcast, while a per-lane address costs one load per lane.
// So: one LANES-wide workgroup, no shared memory, no barriers. The ROWS rows of A a workgroup
// needs are read at addresses that depend only on workgroup_id; each lane owns COLS columns of
// B (lane, lane + LANES, ...) and keeps a ROWS x COLS accumulator block in registers.
//
// The block is spelled out with `#unroll` (named variables, no loops over local arrays):
// SwiftShader (Chromium's WebGPU on the CPU) neither unrolls loops nor promotes a local array
// indexed by a loop counter to registers, so the looped form ran 6-10x slower there
// (tools/swiftshader_gemm_lab). llvmpipe unrolls either form itself.

const LANES: u32 = {{LANES}}u;

@compute @workgroup_size({{LANES}})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    let bt = wg.z;
    let m0 = wg.y * {{ROWS}}u;
    let n0 = wg.x * (LANES * {{COLS}}u) + lane;

    // Clamp instead of branching inside the k loop; out-of-range results are not stored.
#unroll r ROWS
    let row{r} = min(m0 + {r}u, p.m - 1u);
#end
#unroll j COLS
    let col{j} = min(n0 + {j}u * LANES, p.n - 1u);
#end
#if A_CONV
#unroll r ROWS
    let conv{r} = conv_row(row{r});
#end
#endif
#unroll r ROWS
#unroll j COLS
    var acc{r}_{j} = 0.0;
#end
#end

    for (var k = 0u; k < p.k; k++) {
#if A_CONV
        let kc = conv_k(k);
#endif
#unroll j COLS
        let b{j} = load_b(bt, k, col{j});
#end
#unroll r ROWS
#if A_CONV
        let a{r} = load_conv(conv{r}, kc);
#else
        let a{r} = load_a(bt, row{r}, k);
#endif
#unroll j COLS
        acc{r}_{j} = fma(a{r}, b{j}, acc{r}_{j});
#end
#end
    }

#unroll r ROWS
#unroll j COLS
    if (m0 + {r}u < p.m && n0 + {j}u * LANES < p.n) {
        store_c(bt, m0 + {r}u, n0 + {j}u * LANES, acc{r}_{j});
    }
#end
#end
}
