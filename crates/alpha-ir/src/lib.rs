//! Alpha's graph IR: static shapes and dtypes, the op set every system needs, a builder that
//! system code is written against, a verifier whose errors name the system, op and shapes, and a
//! printer.

pub mod dtype;
pub mod graph;
pub mod infer;
pub mod op;
pub mod print;
pub mod program;
pub mod verify;

pub use dtype::DType;
pub use graph::{Graph, IrError, Node, TensorType, Value};
pub use op::{Binary, Init, Op, Reduce, Unary};
pub use program::{Phase, Program};
