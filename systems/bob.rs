//! Bob (SYSTEMS.md §1): a 256×256 fp32 table of next-byte logits. Row x_t holds the logits for
//! x_{t+1}; the loss is the exact 256-way cross-entropy, averaged over positions; AdamW.
//!
//! Not given by the seed, chosen here: zero initialisation (a fresh model is uniform, 8 bits a
//! byte), no weight decay (decay would pull the table toward uniform and away from the counts it
//! should learn), learning rate 0.1 warmed over 20 updates then cosine to a tenth, 64 windows of
//! 256 bytes a step.

use alpha_ir::{DType, Graph, Init, IrError};
use alpha_learn::{AdamW, Decay, Learner, Model, Optimizer, Schedule};

use crate::layers::lm_loss;
use crate::{System, Tokens};

pub struct Bob;

pub const VOCAB: usize = 256;

impl System for Bob {
    fn name(&self) -> &'static str {
        "bob"
    }
    fn description(&self) -> &'static str {
        "next-byte bigram table, 256×256 fp32 logits, exact cross-entropy, AdamW"
    }
    fn vocab(&self) -> usize {
        VOCAB
    }
    fn tokens(&self) -> Tokens {
        Tokens::Bytes
    }
    fn context(&self) -> usize {
        256
    }
    fn default_batch(&self) -> usize {
        64
    }
    fn default_steps(&self) -> u64 {
        600
    }

    fn model(&self, batch: usize) -> Result<Model, IrError> {
        let t = self.context();
        let mut g = Graph::new("bob");
        let tokens = g.input("tokens", &[batch, t], DType::I32);
        let targets = g.input("targets", &[batch, t], DType::I32);
        let table = g.param("logits", &[VOCAB, VOCAB], Init::Zeros);
        let rows = g.gather(table, tokens);
        let logits = g.reshape(rows, &[batch * t, VOCAB]);
        lm_loss(g, logits, targets)
    }

    fn learner(&self, steps: u64) -> Learner {
        Learner::single(
            Optimizer::AdamW(AdamW { beta1: 0.9, beta2: 0.99, eps: 1e-8, weight_decay: 0.0, decay: Decay::None }),
            0.1,
            Schedule::WarmupCosine { warmup: 20.min(steps / 10 + 1), total: steps, floor: 0.1 },
            None,
        )
    }
}
