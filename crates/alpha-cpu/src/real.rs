//! The element type of the CPU arena: f32 for training (the reference), f64 for checking
//! gradients against finite differences. Every tensor, token ids included, is held as one of
//! these (ids are exact in f32 up to 2²⁴).

use num_traits::{Float, FromPrimitive, ToPrimitive};

pub trait Real:
    Float + FromPrimitive + ToPrimitive + Send + Sync + Default + std::fmt::Debug + std::iter::Sum + 'static
{
    /// C ← A·B with strides (matrixmultiply's contract).
    ///
    /// # Safety
    /// The pointers must address m×k, k×n and m×n elements laid out by the given strides.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        c: *mut Self,
        rsc: isize,
        csc: isize,
    );

    fn of(x: f64) -> Self {
        Self::from_f64(x).expect("f64 converts")
    }
    fn f64(self) -> f64 {
        self.to_f64().expect("converts to f64")
    }
}

impl Real for f32 {
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: *const f32,
        rsa: isize,
        csa: isize,
        b: *const f32,
        rsb: isize,
        csb: isize,
        c: *mut f32,
        rsc: isize,
        csc: isize,
    ) {
        matrixmultiply::sgemm(m, k, n, 1.0, a, rsa, csa, b, rsb, csb, 0.0, c, rsc, csc);
    }
}

impl Real for f64 {
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: *const f64,
        rsa: isize,
        csa: isize,
        b: *const f64,
        rsb: isize,
        csb: isize,
        c: *mut f64,
        rsc: isize,
        csc: isize,
    ) {
        matrixmultiply::dgemm(m, k, n, 1.0, a, rsa, csa, b, rsb, csb, 0.0, c, rsc, csc);
    }
}

/// Round to the nearest bf16 (ties to even), as the device does for matrix operands.
pub fn round_bf16<T: Real>(x: T) -> T {
    T::of(half::bf16::from_f32(x.f64() as f32).to_f32() as f64)
}
