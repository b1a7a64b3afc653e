//! The run policy: train, resume, score and predict a system on a device; checkpoints with
//! lineage; the records a run leaves for `alpha serve`.

pub mod artifact;
pub mod backend;
pub mod baseline;
pub mod bench;
pub mod budget;
pub mod checkpoint;
pub mod data;
pub mod gates;
/// Parameter initialisation lives with the learner; re-exported for the run policy's callers.
pub use alpha_learn::init;
pub mod predict;
pub mod profile;
pub mod progress;
pub mod records;
pub mod rundir;
pub mod score;
pub mod session;
pub mod testhook;
pub mod train;

pub use backend::{Backend, CpuBackend};
pub use session::Device;
pub use train::{request_stop, train, TrainOptions, TrainResult};
