//! alpha-cuda
