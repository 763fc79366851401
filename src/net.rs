//! The backend-neutral network description: a model is its weights (named f32 tensors) and a
//! list of [`Step`]s over per-image activation [`Slot`]s. Model files (`models/`) build it
//! once, at load, and know nothing of who runs it; executors (`exec::gpu` records WGSL
//! dispatches, `exec::cpu` runs SIMD kernels) run it for any batch size.
//!
//! Every step is per image. A [`View`] is a strided matrix inside a slot, and an image's part
//! of a slot starts `bs` floats after the previous image's; rows of a [`GemmKind::Linear`] run
//! over all images at once (image b's rows follow image b-1's), which is how both executors
//! fold the batch into one GEMM.

use crate::error::{Error, Result};
use crate::weights::Weights;

/// Index of a tensor in [`Net::weights`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct W(pub usize);

/// A weight tensor as the file named it. Matrices are `[rows, cols] = [shape[0], the rest]`
/// (a conv weight flattens to `[out, in * kh * kw]`).
pub struct Tensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl Tensor {
    pub fn rows(&self) -> usize {
        self.shape.first().copied().unwrap_or(1)
    }
    pub fn cols(&self) -> usize {
        self.shape.iter().skip(1).product()
    }
}

/// The activation buffers a network works in. Each has a per-image size, derived from the
/// steps that touch it ([`Net::slot_floats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Slot {
    /// The preprocessed image, CHW.
    Input,
    /// The residual stream.
    X,
    /// A normalised copy of the stream (and other scratch).
    Xn,
    Hidden,
    Aux,
    Pooled,
    Logits,
    /// Per-token class evidence, [tokens, classes] per image: written only by the
    /// [`Explain`] steps, so plain forward passes do not allocate it.
    Evidence,
}

/// Per-slot sizes, in [`Slot::ALL`] order.
pub type SlotSizes = [usize; Slot::COUNT];

impl Slot {
    pub const COUNT: usize = 8;
    pub const ALL: [Slot; Slot::COUNT] = [Slot::Input, Slot::X, Slot::Xn, Slot::Hidden, Slot::Aux, Slot::Pooled, Slot::Logits, Slot::Evidence];
    pub fn index(self) -> usize {
        self as usize
    }
    pub fn name(self) -> &'static str {
        ["input", "x", "xn", "hidden", "aux", "pooled", "logits", "evidence"][self.index()]
    }
}

/// A strided matrix in a slot: element (i, j) of image b is at `off + b * bs + i * ld + j`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View {
    pub slot: Slot,
    pub off: usize,
    pub ld: usize,
    pub bs: usize,
}

impl View {
    /// A dense [rows, ld] matrix at the start of `slot`, images `rows * ld` apart.
    pub fn dense(slot: Slot, rows: usize, ld: usize) -> View {
        View { slot, off: 0, ld, bs: rows * ld }
    }
}

/// Geometry of a convolution run as a GEMM (implicit im2col).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvGeometry {
    pub cin: usize,
    pub ih: usize,
    pub iw: usize,
    pub kh: usize,
    pub kw: usize,
    pub stride: usize,
    pub pad: usize,
}

impl ConvGeometry {
    pub fn out_hw(&self) -> Result<(usize, usize)> {
        let span = |i: usize, k: usize| (i + 2 * self.pad).checked_sub(k).map(|v| v / self.stride + 1);
        match (span(self.ih, self.kh), span(self.iw, self.kw)) {
            (Some(h), Some(w)) if self.stride > 0 => Ok((h, w)),
            _ => {
                Err(Error::Input(format!("image {}x{} is smaller than the {}x{} kernel (padding {})", self.ih, self.iw, self.kh, self.kw, self.pad)))
            }
        }
    }
}

/// What a GEMM multiplies. The weight `w` is PyTorch's [out, in].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GemmKind {
    /// `C[r, :] = A[r, :] · Wᵀ` for `rows` rows per image (a Linear layer, a 1x1 conv).
    Linear { rows: usize, a: View },
    /// `C = W · X` per image, X [W.cols, channels]: mixing across tokens, no transpose.
    Tokens { x: View, channels: usize },
    /// A convolution of `input` (NCHW, or channels-last tokens with `nhwc`); the output is
    /// channels-last [oh * ow, out].
    Conv { input: Slot, geometry: ConvGeometry, nhwc: bool },
}

/// One GEMM with its fused epilogue, in this order:
/// `C (+)= gate ⊙ (act(A·B + bias) * scale)`. The bias runs along output features (Linear,
/// Conv) or output tokens (Tokens); the scale along output features or channels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gemm {
    pub kind: GemmKind,
    pub w: W,
    pub c: View,
    pub bias: Option<W>,
    pub scale: Option<W>,
    pub gelu: bool,
    /// Multiplies each result by the element at the same place of a matrix laid out like C.
    pub gate: Option<View>,
    /// Adds to what C holds instead of overwriting it.
    pub residual: bool,
}

impl Gemm {
    pub fn new(kind: GemmKind, w: W, c: View) -> Gemm {
        Gemm { kind, w, c, bias: None, scale: None, gelu: false, gate: None, residual: false }
    }
    pub fn bias(mut self, b: W) -> Self {
        self.bias = Some(b);
        self
    }
    pub fn scale(mut self, s: Option<W>) -> Self {
        self.scale = s;
        self
    }
    pub fn gelu(mut self) -> Self {
        self.gelu = true;
        self
    }
    pub fn gate(mut self, g: View) -> Self {
        self.gate = Some(g);
        self
    }
    pub fn residual(mut self) -> Self {
        self.residual = true;
        self
    }
}

/// One step of a forward pass, per image.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Gemm(Gemm),
    /// `y[r] = LayerNorm(x[r]) * gamma + beta` over `rows` rows of width `d`; `x` may be a
    /// strided view (gMLP's gate half), `y` is dense.
    LayerNorm {
        rows: usize,
        d: usize,
        eps: f32,
        x: View,
        gamma: W,
        beta: W,
        y: Slot,
    },
    /// `y = alpha * x + beta` per channel (ResMLP).
    Affine {
        rows: usize,
        d: usize,
        x: Slot,
        alpha: W,
        beta: W,
        y: Slot,
    },
    /// GroupNorm with one group over each image's [tokens, d] (PoolFormer).
    GroupNorm {
        tokens: usize,
        d: usize,
        eps: f32,
        x: Slot,
        gamma: W,
        beta: W,
        y: Slot,
    },
    /// `x += scale * (AvgPool3x3(xn) - xn)` on a channels-last [h, w, d] grid,
    /// count_include_pad = False (PoolFormer's token mixer).
    PoolMix {
        h: usize,
        w: usize,
        d: usize,
        xn: Slot,
        scale: W,
        x: Slot,
    },
    /// `y[c] = mean over tokens of x[t, c]`.
    MeanTokens {
        tokens: usize,
        d: usize,
        x: Slot,
        y: Slot,
    },
    /// Keep the first `floats` values of `x` of the latest image as the next stage's output
    /// (PoolFormer's per-stage token energy for the page; [`Net::stages`] has their shapes).
    Snapshot {
        x: Slot,
        floats: usize,
    },
}

/// How a net splits each logit into one contribution per token of its last token grid
/// (`tokenmix explain`): steps that run after [`Net::steps`] and leave `E` [tokens, classes]
/// per image in [`Slot::Evidence`], so that `logit_c = Σ_t E[t, c] + bias_c`.
///
/// Mixer, gMLP and ResMLP pool normalised tokens and apply a linear head, so
/// `E[t, c] = w_c · n_t / T` is exact. PoolFormer normalises *after* pooling; its split holds
/// the head LayerNorm's statistics (μ, σ of the pooled vector) at this image's values, which
/// makes the sum exact but each token's share a linearisation (see [`FrozenNorm`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Explain {
    pub steps: Vec<Step>,
    /// The token grid E's rows run over, row-major.
    pub grid: (usize, usize),
    /// Per class, the part of the logit no token carries.
    pub bias: Vec<f32>,
    pub frozen_norm: Option<FrozenNorm>,
}

/// PoolFormer's head `fc(LayerNorm(mean_t x_t))`: with `γ`, `β` the norm's affine and
/// `W' = W ⊙ γ` (folded into the evidence GEMM, which gives `E'[t, c] = W'_c · x_t / T`),
/// `logit_c = Σ_t (E'[t, c] − μ s_c / T) / σ + (W_c · β + b_c)` where `μ`, `σ² + eps` are the
/// mean and variance over channels of the pooled vector (left in [`Slot::Pooled`], `d`
/// floats per image) and `s_c = Σ_k W'_ck`. The host applies the `μ`, `σ` correction.
#[derive(Clone, Debug, PartialEq)]
pub struct FrozenNorm {
    pub d: usize,
    pub eps: f32,
    pub row_sums: Vec<f32>,
}

impl Explain {
    pub fn tokens(&self) -> usize {
        self.grid.0 * self.grid.1
    }
}

/// A whole network: weights, steps, and what goes in and comes out.
pub struct Net {
    pub weights: Vec<Tensor>,
    pub steps: Vec<Step>,
    /// Floats of one image's input (C·H·W), in [`Slot::Input`].
    pub input: usize,
    /// Logits per image, in [`Slot::Logits`] once the steps ran.
    pub classes: usize,
    /// (token grid, width) of each [`Step::Snapshot`], in stage order.
    pub stages: Vec<((usize, usize), usize)>,
    /// The per-token split of the logits, where the family has one.
    pub explain: Option<Explain>,
}

impl Net {
    /// The steps of a forward pass, and with `explain` the evidence steps after them.
    pub fn steps_for(&self, explain: bool) -> impl Iterator<Item = &Step> {
        let extra = match (&self.explain, explain) {
            (Some(e), true) => &e.steps[..],
            _ => &[],
        };
        self.steps.iter().chain(extra)
    }

    pub fn weight(&self, w: W) -> &Tensor {
        &self.weights[w.0]
    }

    /// Floats each slot needs per image: the furthest element any step reads or writes there
    /// (with `explain`, the evidence steps' too).
    pub fn slot_floats(&self, explain: bool) -> SlotSizes {
        let mut need = [0usize; Slot::COUNT];
        need[Slot::Input.index()] = self.input;
        need[Slot::Logits.index()] = self.classes;
        fn grow_to(need: &mut SlotSizes, slot: Slot, n: usize) {
            need[slot.index()] = need[slot.index()].max(n);
        }
        // A view of `rows` x `cols` whose images are `bs` apart.
        fn view_in(need: &mut SlotSizes, v: &View, rows: usize, cols: usize) {
            grow_to(need, v.slot, v.bs.max(v.off + rows.saturating_sub(1) * v.ld + cols));
        }
        let need = &mut need;
        for step in self.steps_for(explain) {
            match step {
                Step::Gemm(g) => {
                    let (m, n, _) = self.gemm_dims(g);
                    if let GemmKind::Linear { a, rows } = g.kind {
                        view_in(need, &View { bs: rows * a.ld, ..a }, rows, self.weight(g.w).cols());
                    }
                    if let GemmKind::Tokens { x, channels } = g.kind {
                        view_in(need, &x, self.weight(g.w).cols(), channels);
                    }
                    if let GemmKind::Conv { input, geometry: c, .. } = g.kind {
                        grow_to(need, input, c.cin * c.ih * c.iw);
                    }
                    let c_bs = if matches!(g.kind, GemmKind::Tokens { .. }) { g.c.bs } else { m * g.c.ld };
                    view_in(need, &View { bs: c_bs, ..g.c }, m, n);
                    if let Some(gate) = &g.gate {
                        let bs = if matches!(g.kind, GemmKind::Tokens { .. }) { gate.bs } else { m * gate.ld };
                        view_in(need, &View { bs, ..*gate }, m, n);
                    }
                }
                Step::LayerNorm { rows, d, x, y, .. } => {
                    view_in(need, &View { bs: rows * x.ld, ..*x }, *rows, *d);
                    grow_to(need, *y, rows * d);
                }
                Step::Affine { rows, d, x, y, .. } => {
                    grow_to(need, *x, rows * d);
                    grow_to(need, *y, rows * d);
                }
                Step::GroupNorm { tokens, d, x, y, .. } => {
                    grow_to(need, *x, tokens * d);
                    grow_to(need, *y, tokens * d);
                }
                Step::PoolMix { h, w, d, xn, x, .. } => {
                    grow_to(need, *xn, h * w * d);
                    grow_to(need, *x, h * w * d);
                }
                Step::MeanTokens { tokens, d, x, y } => {
                    grow_to(need, *x, tokens * d);
                    grow_to(need, *y, *d);
                }
                Step::Snapshot { x, floats } => grow_to(need, *x, *floats),
            }
        }
        *need
    }

    /// Bytes of one image's widest activation slot (at least 4), with or without the evidence
    /// steps: what a storage binding must hold for a batch of one.
    pub fn widest_slot_bytes(&self, explain: bool) -> u64 {
        self.slot_floats(explain).into_iter().max().unwrap_or(1).max(1) as u64 * 4
    }

    /// A step's kind and shape class, the same on every executor: what a [`crate::exec::Profile`]
    /// adds time up by (e.g. "linear 196x512x2048 gelu": m x k x n for one image).
    pub fn step_kind(&self, step: &Step) -> String {
        match step {
            Step::Gemm(g) => {
                let (m, n, k) = self.gemm_dims(g);
                let kind = match g.kind {
                    GemmKind::Linear { .. } => "linear",
                    GemmKind::Tokens { .. } => "tokens",
                    GemmKind::Conv { .. } => "conv",
                };
                format!("{kind} {m}x{k}x{n}{}", if g.gelu { " gelu" } else { "" })
            }
            Step::LayerNorm { .. } => "layer_norm".into(),
            Step::Affine { .. } => "affine".into(),
            Step::GroupNorm { .. } => "group_norm".into(),
            Step::PoolMix { .. } => "pool".into(),
            Step::MeanTokens { .. } => "mean".into(),
            Step::Snapshot { .. } => "snapshot".into(),
        }
    }

    /// (m, n, k) of a GEMM for one image (a Linear GEMM's m is its rows per image).
    pub fn gemm_dims(&self, g: &Gemm) -> (usize, usize, usize) {
        let w = self.weight(g.w);
        match g.kind {
            GemmKind::Linear { rows, .. } => (rows, w.rows(), w.cols()),
            GemmKind::Tokens { channels, .. } => (w.rows(), channels, w.cols()),
            GemmKind::Conv { geometry, .. } => {
                let (oh, ow) = geometry.out_hw().unwrap_or((0, 0));
                (oh * ow, w.rows(), w.cols())
            }
        }
    }

    /// Weights read as the matrix operand of a GEMM (executors may lay these out differently).
    pub fn gemm_weights(&self) -> Vec<bool> {
        let mut is = vec![false; self.weights.len()];
        for step in self.steps_for(true) {
            if let Step::Gemm(g) = step {
                is[g.w.0] = true;
            }
        }
        is
    }

    /// Checks every step's shapes against its weights, so executors can trust them: weight
    /// vectors long enough, conv weights matching the geometry, views inside their slots.
    pub fn validate(&self) -> Result<()> {
        let vector = |w: W, len: usize, what: &str| -> Result<()> {
            let t = self.weights.get(w.0).ok_or_else(|| Error::Config(format!("{what}: no weight {}", w.0)))?;
            if t.data.len() != len {
                return Err(Error::tensor(&t.name, format!("has {} values, the {what} needs {len}", t.data.len())));
            }
            Ok(())
        };
        if let Some(e) = &self.explain {
            let bad = e.bias.len() != self.classes || e.frozen_norm.as_ref().is_some_and(|f| f.row_sums.len() != self.classes);
            if bad || e.steps.iter().any(|s| matches!(s, Step::Snapshot { .. })) {
                return Err(Error::Config("the evidence split does not match the head".into()));
            }
        }
        for step in self.steps_for(true) {
            match step {
                Step::Gemm(g) => {
                    let t = self.weights.get(g.w.0).ok_or_else(|| Error::Config("GEMM weight missing".into()))?;
                    if t.rows() * t.cols() != t.data.len() || t.data.is_empty() {
                        return Err(Error::tensor(&t.name, "is not a matrix"));
                    }
                    let (m, n, k) = self.gemm_dims(g);
                    if m == 0 || n == 0 || k == 0 {
                        return Err(Error::Input(format!("`{}`: GEMM with an empty dimension m={m} n={n} k={k}", t.name)));
                    }
                    if let GemmKind::Conv { geometry: g2, .. } = g.kind {
                        if g2.cin * g2.kh * g2.kw != k {
                            return Err(Error::tensor(&t.name, format!("has {k} columns, the convolution needs {}", g2.cin * g2.kh * g2.kw)));
                        }
                    }
                    let (bias_len, scale_len) = match g.kind {
                        GemmKind::Tokens { .. } => (m, n),
                        _ => (n, n),
                    };
                    if let Some(b) = g.bias {
                        vector(b, bias_len, "bias")?;
                    }
                    if let Some(s) = g.scale {
                        vector(s, scale_len, "scale")?;
                    }
                }
                Step::LayerNorm { d, gamma, beta, .. } | Step::GroupNorm { d, gamma, beta, .. } => {
                    vector(*gamma, *d, "norm weight")?;
                    vector(*beta, *d, "norm bias")?;
                }
                Step::Affine { d, alpha, beta, .. } => {
                    vector(*alpha, *d, "affine alpha")?;
                    vector(*beta, *d, "affine beta")?;
                }
                Step::PoolMix { d, scale, .. } => vector(*scale, *d, "layer scale")?,
                Step::MeanTokens { .. } | Step::Snapshot { .. } => {}
            }
        }
        Ok(())
    }
}

/// Builds a [`Net`]: takes named tensors from a checkpoint (shape-checked) and collects steps.
pub struct Builder<'w, 'a> {
    pub weights: &'w mut Weights<'a>,
    tensors: Vec<Tensor>,
    pub steps: Vec<Step>,
    pub stages: Vec<((usize, usize), usize)>,
}

impl<'w, 'a> Builder<'w, 'a> {
    pub fn new(weights: &'w mut Weights<'a>) -> Self {
        Builder { weights, tensors: Vec::new(), steps: Vec::new(), stages: Vec::new() }
    }

    /// Takes the named tensor after checking its shape.
    pub fn take(&mut self, name: &str, shape: &[usize]) -> Result<W> {
        let data = self.weights.take(name, shape)?;
        Ok(self.add(name, shape.to_vec(), data))
    }

    /// The named vector, or `fill` repeated when the file has none (e.g. a MetaFormer built
    /// without layer scale, which is a scale of one).
    pub fn take_or(&mut self, name: &str, len: usize, fill: f32) -> Result<W> {
        if self.weights.contains(name) {
            self.take(name, &[len])
        } else {
            Ok(self.add(name, vec![len], vec![fill; len]))
        }
    }

    /// A tensor that is not in the file (tests, synthetic layers).
    pub fn add(&mut self, name: &str, shape: Vec<usize>, data: Vec<f32>) -> W {
        self.tensors.push(Tensor { name: name.to_string(), shape, data });
        W(self.tensors.len() - 1)
    }

    pub fn push(&mut self, step: Step) {
        self.steps.push(step);
    }

    pub fn gemm(&mut self, g: Gemm) {
        self.steps.push(Step::Gemm(g));
    }

    pub fn shape(&self, w: W) -> &[usize] {
        &self.tensors[w.0].shape
    }

    /// The values of a tensor taken so far.
    pub fn data(&self, w: W) -> &[f32] {
        &self.tensors[w.0].data
    }

    pub fn finish(self, input: usize, classes: usize, explain: Option<Explain>) -> Result<Net> {
        let net = Net { weights: self.tensors, steps: self.steps, input, classes, stages: self.stages, explain };
        net.validate()?;
        Ok(net)
    }
}

/// A net put together by hand (tests of single steps): tensors and steps as given.
pub fn from_parts(weights: Vec<Tensor>, steps: Vec<Step>, input: usize, classes: usize) -> Result<Net> {
    let net = Net { weights, steps, input, classes, stages: Vec::new(), explain: None };
    net.validate()?;
    Ok(net)
}
