//! The systems: each a model, its learner and its run defaults, written once against the graph
//! builder and compiled for any device. SYSTEMS.md says what each one is exactly.

pub mod bob;
pub mod coppelius;
pub mod decode;
pub mod diakosmos;
pub mod diakosmos_wire;
pub mod gpt2;
pub mod kickdelta;
pub mod layers;
pub mod mini;
pub mod polf;
pub mod views;

use alpha_ir::IrError;
use alpha_learn::{Learner, Model};

/// How a system's text is tokenized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tokens {
    /// One token a byte: 256 ids.
    Bytes,
    /// Byte-level BPE with this vocabulary.
    Bpe(usize),
    /// Byte-level BPE with this vocabulary, each document opened by the tokenizer's reserved id
    /// as its beginning-of-sequence mark and closed by nothing (the reference of a system that
    /// reads its streams so).
    BpeBos(usize),
}

/// A learning system.
pub trait System: Send + Sync {
    fn name(&self) -> &'static str;
    /// One line for the catalogue.
    fn description(&self) -> &'static str;
    fn vocab(&self) -> usize;
    fn tokens(&self) -> Tokens;
    /// Positions per sequence.
    fn context(&self) -> usize;
    /// Sequences a step by default.
    fn default_batch(&self) -> usize;
    /// Steps of the default run.
    fn default_steps(&self) -> u64;
    /// The model for `batch` sequences of `context` tokens: inputs `tokens` and `targets`,
    /// both i32 `[batch, context]`.
    fn model(&self, batch: usize) -> Result<Model, IrError>;
    /// The learner for a run of `steps` updates.
    fn learner(&self, steps: u64) -> Learner;
    /// Under a wall-clock budget (`alpha train --budget`), the updates' worth of time over which
    /// the rate falls to 0 at the end ([`alpha_learn::TimeBudget`]).
    fn warmdown_updates(&self) -> u64 {
        alpha_learn::DEFAULT_WARMDOWN_UPDATES
    }
    /// Parameters the artifact export keeps in fp32 whatever their size: gains, mixes and
    /// scales whose exact values steer the whole network, so fp16's rounding of them costs more
    /// than their few bytes save. Path patterns as a learner's groups take them, matched against
    /// the whole path (`*` any run of characters: `*resid_mix*` for every path holding
    /// `resid_mix`); none by default.
    fn control_tensors(&self) -> &'static [&'static str] {
        &[]
    }
    /// The one-position decode program with its caches ([`decode`]), for systems that have one:
    /// prediction then costs a position a token instead of a window.
    fn decoder(&self) -> Option<Result<decode::Decoder, IrError>> {
        None
    }
    /// What a run page shows of the system's insides besides its loss ([`views`]): figures read
    /// from each kept checkpoint and tables its definition fixes. None by default.
    fn model_views(&self) -> Vec<views::ModelView> {
        vec![]
    }
}

/// Every system Alpha knows, in catalogue order.
pub fn catalogue() -> Vec<Box<dyn System>> {
    vec![
        Box::new(bob::Bob),
        Box::new(coppelius::Coppelius::default()),
        Box::new(gpt2::Gpt2::default()),
        Box::new(mini::Mini::new(mini::Roles::AdamW)),
        Box::new(mini::Mini::new(mini::Roles::MuonAdam)),
        Box::new(mini::Mini::new(mini::Roles::Mixed)),
        Box::new(kickdelta::KickDelta),
        Box::new(diakosmos::Diakosmos::default()),
        Box::new(polf::Polf::default()),
    ]
}

/// The system called `name`, or an error listing the known ones.
pub fn find(name: &str) -> Result<Box<dyn System>, String> {
    let all = catalogue();
    let names: Vec<&str> = all.iter().map(|s| s.name()).collect();
    let list = names.join(", ");
    all.into_iter().find(|s| s.name() == name).ok_or_else(|| format!("unknown system '{name}'; known systems: {list}"))
}
