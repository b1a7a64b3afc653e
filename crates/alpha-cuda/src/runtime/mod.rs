//! The bottom layer: the CUDA driver ([`driver`]). It loads PTX, owns the device arena and
//! launches and captures kernels from raw addresses; it knows no plan, lowering or kernel family.

pub mod driver;
