// Global average over tokens: [batch, tokens, d] -> [batch, d]. One invocation per output.

struct Params {
    batch: u32,
    tokens: u32,
    d: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i >= p.batch * p.d) {
        return;
    }
    let bt = i / p.d;
    let ch = i % p.d;
    var sum = 0.0;
    for (var t = 0u; t < p.tokens; t++) {
        sum += x[(bt * p.tokens + t) * p.d + ch];
    }
    y[i] = sum / f32(p.tokens);
}
