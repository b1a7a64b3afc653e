//! Coppelius in miniature — 4 blocks of width 128, 4 heads of 32, gated-GELU FFN of 352, tied
//! BPE-4096 embedding, context 128; 1,329,408 parameters — small enough to train for hundreds of
//! steps on two CPU cores, so learners can be compared by held-out loss at equal steps. Three
//! learners over the same model, one catalogue entry each:
//!
//! - `mini`: AdamW on everything (Coppelius's recipe: β (0.9, 0.95), decay 0.1 on matrices);
//! - `mini-muon`: Muon on every block matrix, Adam on the embedding, gains and biases;
//! - `mini-mixed`: Muon on the attention output and FFN matrices, rotational AdamW on the qkv
//!   projections, Adam on the rest — three optimizers in one step, as Diakosmos trains.
//!
//! Every learner: warm-up 50 updates, cosine to a tenth at the run's end, clip at 1.0.

use alpha_ir::IrError;
use alpha_learn::{AdamW, Decay, Group, Learner, Model, Muon, Optimizer, Rotational, Rows, Schedule};

use crate::coppelius::Coppelius;
use crate::{System, Tokens};

/// Which learner the miniature trains with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Roles {
    AdamW,
    MuonAdam,
    Mixed,
}

#[derive(Debug, Clone)]
pub struct Mini {
    pub roles: Roles,
    pub geometry: Coppelius,
}

impl Mini {
    pub fn new(roles: Roles) -> Mini {
        Mini { roles, geometry: Coppelius { blocks: 4, width: 128, heads: 4, ffn: 352, vocab: 4096, context: 128 } }
    }
}

/// Adam on what is not a block matrix: β (0.9, 0.95) as Coppelius's AdamW, no decay.
fn adam() -> Optimizer {
    Optimizer::Adam { beta1: 0.9, beta2: 0.95, eps: 1e-8 }
}

impl System for Mini {
    fn name(&self) -> &'static str {
        match self.roles {
            Roles::AdamW => "mini",
            Roles::MuonAdam => "mini-muon",
            Roles::Mixed => "mini-mixed",
        }
    }
    fn description(&self) -> &'static str {
        match self.roles {
            Roles::AdamW => "Coppelius in miniature (4 blocks, width 128, BPE 4096, context 128), AdamW",
            Roles::MuonAdam => "the miniature with Muon on its block matrices and Adam on the rest",
            Roles::Mixed => "the miniature with Muon, rotational AdamW (qkv) and Adam by role",
        }
    }
    fn vocab(&self) -> usize {
        self.geometry.vocab
    }
    fn tokens(&self) -> Tokens {
        Tokens::Bpe(self.geometry.vocab)
    }
    fn context(&self) -> usize {
        self.geometry.context
    }
    fn default_batch(&self) -> usize {
        8
    }
    fn default_steps(&self) -> u64 {
        400
    }
    fn model(&self, batch: usize) -> Result<Model, IrError> {
        let mut model = self.geometry.model(batch)?;
        // Errors and profiles name the system that built the graph.
        model.graph.system = self.name().to_string();
        Ok(model)
    }

    fn learner(&self, steps: u64) -> Learner {
        let schedule = Schedule::WarmupCosine { warmup: 50.min(steps), total: steps.max(51), floor: 0.1 };
        let muon = Optimizer::Muon(Muon::standard(Rows::Inputs));
        let groups = match self.roles {
            Roles::AdamW => vec![Group::new(
                "all",
                &["*"],
                Optimizer::AdamW(AdamW {
                    beta1: 0.9,
                    beta2: 0.95,
                    eps: 1e-8,
                    weight_decay: 0.1,
                    decay: Decay::MatricesOnly,
                }),
                3e-3,
            )],
            Roles::MuonAdam => vec![
                Group::new("muon", &["blocks.*.attn.*.weight", "blocks.*.ffn.*.weight"], muon, 0.02),
                Group::new("adam", &["embed.weight", "*.bias", "*ln*.weight"], adam(), 3e-3),
            ],
            Roles::Mixed => vec![
                Group::new("muon", &["blocks.*.attn.out.weight", "blocks.*.ffn.*.weight"], muon, 0.02),
                Group::new(
                    "rotational",
                    &["blocks.*.attn.qkv.weight"],
                    Optimizer::RotationalAdamW(Rotational::standard(Rows::Inputs)),
                    3e-3,
                ),
                Group::new("adam", &["embed.weight", "*.bias", "*ln*.weight"], adam(), 3e-3),
            ],
        };
        Learner { groups, schedule, clip: Some(1.0), accumulation: 1 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_learners_take_every_parameter_once() {
        for roles in [Roles::AdamW, Roles::MuonAdam, Roles::Mixed] {
            let m = Mini::new(roles);
            let model = m.model(1).unwrap();
            assert_eq!(model.graph.parameter_count(), 1_329_408);
            let program = m.learner(10).training_program(model).unwrap();
            let states = program.graph.nodes.iter().filter(|n| matches!(n.op, alpha_ir::Op::State { .. })).count();
            // AdamW: two moments for each of the 39 tensors; Muon: a buffer for each of 20
            // matrices and two moments for the 19 others; mixed: 16 Muon buffers, 4 qkv with
            // moments and two per-feature vectors, 19 Adam tensors with two moments.
            let want = match roles {
                Roles::AdamW => 78,
                Roles::MuonAdam => 20 + 38,
                Roles::Mixed => 16 + 16 + 38,
            };
            assert_eq!(states, want, "{}", m.name());
            assert_eq!(program.graph.system, m.name());
        }
    }
}
