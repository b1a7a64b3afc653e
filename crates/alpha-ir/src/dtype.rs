//! Element types. The IR is explicit about them so a backend can size its arena exactly and
//! decide where to round: fp32 master state, bf16 matrix operands, integer token ids.

use serde::{Deserialize, Serialize};

/// An element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DType {
    F32,
    /// Only for reference checks (finite differences in f64); systems never use it.
    F64,
    BF16,
    I32,
    U16,
    U8,
}

impl DType {
    /// Bytes one element takes on a device.
    pub fn size(self) -> usize {
        match self {
            DType::F64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::BF16 | DType::U16 => 2,
            DType::U8 => 1,
        }
    }

    /// Floating-point types: the ones arithmetic and gradients are defined on.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::BF16)
    }

    /// Integer types: token ids and indices.
    pub fn is_int(self) -> bool {
        !self.is_float()
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::U16 => "u16",
            DType::U8 => "u8",
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
