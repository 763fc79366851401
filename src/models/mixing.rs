//! The visualiser's data: each layer's learned token mixing, read from the checkpoint.

use serde::Serialize;

use crate::error::Result;
use crate::weights::Weights;

use super::arch::Arch;
use super::mlp_mixer::BlockKind;

/// One layer's learned token mixing, for the visualiser: a row-major `rows` x `cols` matrix
/// whose columns are the tokens of a `grid` (Mixer: token-MLP fc1, one row per hidden unit;
/// gMLP: the SGU projection; ResMLP: linear_tokens — both tokens x tokens). PoolFormer learns
/// no token mixing: its entry is the fixed 3x3 pooling-minus-identity kernel (grid 3x3).
#[derive(Clone, Debug, Serialize)]
pub struct TokenMixing {
    pub kind: &'static str,
    pub rows: usize,
    pub cols: usize,
    pub grid: (usize, usize),
    pub data: Vec<f32>,
    pub note: &'static str,
    /// The layer's tokens x tokens map, for the structure figures (see [`Self::token_map`]).
    #[serde(skip)]
    pub map: TokenMap,
}

/// Where a layer's tokens x tokens map comes from.
#[derive(Clone, Debug)]
pub enum TokenMap {
    /// `data` is the map (gMLP's SGU projection, ResMLP's linear_tokens).
    Weights,
    /// Mixer: the token MLP linearised at zero input (`crate::insight::linearised`), from
    /// `data` (fc1), fc1's bias and fc2; computed when first asked for, not at load (a
    /// mixer_l16 has 24 layers of 196 x 196 x 512 multiply-adds, seconds in a browser, and
    /// most loads never look at most layers).
    Linearised { b1: Vec<f32>, fc2: Vec<f32>, map: std::sync::OnceLock<Vec<f32>> },
    /// PoolFormer: no learned token mixing.
    None,
}

impl TokenMixing {
    /// The tokens x tokens map the structure figures are measured on, if the layer learns one.
    pub fn token_map(&self) -> Option<&[f32]> {
        match &self.map {
            TokenMap::Weights => Some(&self.data),
            TokenMap::Linearised { b1, fc2, map } => {
                Some(map.get_or_init(|| crate::insight::linearised(&self.data, Some(b1), fc2, self.cols, self.rows)))
            }
            TokenMap::None => None,
        }
    }
}

/// CPU copies of each layer's token-mixing weights (see [`TokenMixing`]), read after the
/// network loaded, so shapes are already checked and the grid is the inferred config's.
pub(crate) fn token_mixing(w: &Weights, arch: &Arch) -> Result<Vec<TokenMixing>> {
    let cfg = match arch {
        Arch::MlpMixer(cfg) => cfg,
        Arch::MetaFormer(_) => {
            let mut data = vec![1.0 / 9.0; 9];
            data[4] -= 1.0;
            return Ok(vec![TokenMixing {
                kind: "poolformer",
                rows: 3,
                cols: 3,
                grid: (3, 3),
                data,
                map: TokenMap::None,
                note: "PoolFormer learns no token mixing: every block averages each token's 3x3 neighbourhood and subtracts the token (interior weights shown; at borders only in-image neighbours count)",
            }]);
        }
    };
    let tokens = cfg.tokens();
    let (name, kind, rows, note) = match cfg.block {
        BlockKind::Mixer => (
            "mlp_tokens.fc1.weight",
            "mixer",
            cfg.tokens_hidden.unwrap_or(0),
            "token-MLP fc1: one row per hidden unit, its weights over the token grid",
        ),
        BlockKind::Gmlp => {
            ("mlp_channels.gate.proj.weight", "gmlp", tokens, "spatial gating projection: row t mixes output token t from every token")
        }
        BlockKind::Resmlp => ("linear_tokens.weight", "resmlp", tokens, "linear token map: row t mixes output token t from every token"),
    };
    (0..cfg.depth)
        .map(|i| {
            let data = w.read(&format!("blocks.{i}.{name}"))?;
            let map = match cfg.block {
                BlockKind::Mixer => {
                    let p = format!("blocks.{i}.mlp_tokens");
                    let (b1, fc2) = (w.read(&format!("{p}.fc1.bias"))?, w.read(&format!("{p}.fc2.weight"))?);
                    TokenMap::Linearised { b1, fc2, map: std::sync::OnceLock::new() }
                }
                _ => TokenMap::Weights,
            };
            Ok(TokenMixing { kind, rows, cols: tokens, grid: cfg.grid(), data, map, note })
        })
        .collect()
}
