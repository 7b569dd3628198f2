//! Element types. A run-time enum, so a script can pick any of them.

use half::{bf16, f16};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    Bool,
    U8,
    U32,
    I64,
    BF16,
    F16,
    F32,
    F64,
}

impl DType {
    pub const ALL: [DType; 8] = [
        DType::Bool,
        DType::U8,
        DType::U32,
        DType::I64,
        DType::BF16,
        DType::F16,
        DType::F32,
        DType::F64,
    ];
    pub const FLOATS: [DType; 4] = [DType::BF16, DType::F16, DType::F32, DType::F64];

    pub fn is_float(self) -> bool {
        matches!(self, DType::BF16 | DType::F16 | DType::F32 | DType::F64)
    }

    pub fn is_int(self) -> bool {
        matches!(self, DType::U8 | DType::U32 | DType::I64)
    }

    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::Bool | DType::U8 => 1,
            DType::BF16 | DType::F16 => 2,
            DType::U32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "u8",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    pub fn parse(name: &str) -> Option<DType> {
        Some(match name.to_ascii_lowercase().as_str() {
            "bool" => DType::Bool,
            "u8" | "uint8" => DType::U8,
            "u32" | "uint32" => DType::U32,
            "i64" | "int64" | "long" => DType::I64,
            "bf16" | "bfloat16" => DType::BF16,
            "f16" | "float16" | "half" => DType::F16,
            "f32" | "float32" | "float" => DType::F32,
            "f64" | "float64" | "double" => DType::F64,
            _ => return None,
        })
    }

    /// PyTorch's promotion between two tensor dtypes: bool < ints < floats, and within a
    /// category the wider type wins. BF16 with F16 gives F32, as in PyTorch.
    pub fn promote(self, other: DType) -> DType {
        use DType::*;
        if self == other {
            return self;
        }
        match (self, other) {
            (BF16, F16) | (F16, BF16) => F32,
            (a, b) if a.is_float() && !b.is_float() => a,
            (a, b) if b.is_float() && !a.is_float() => b,
            (U8, U32) | (U32, U8) => U32,
            (U32, I64) | (I64, U32) => I64,
            (a, b) => a.max(b),
        }
    }

    /// The dtype kernels compute and keep statistics in for this one (`Real`'s f32 or f64):
    /// F64 for F64, F32 for everything else, so BF16 and F16 accumulate in F32.
    pub fn compute_dtype(self) -> DType {
        if self == DType::F64 {
            DType::F64
        } else {
            DType::F32
        }
    }

    /// The dtype a float-valued op (exp, mean, softmax) produces for this input.
    pub fn float_result(self) -> DType {
        if self.is_float() {
            self
        } else {
            DType::F32
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust element type that a CPU storage holds. Conversions go through f64, which holds every
/// value of every supported type exactly except the largest i64s.
pub trait WithDType: Copy + Send + Sync + PartialOrd + std::fmt::Debug + 'static {
    const DTYPE: DType;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
    fn to_f32(self) -> f32 {
        self.to_f64() as f32
    }
    fn from_f32(v: f32) -> Self {
        Self::from_f64(v as f64)
    }
    fn zero() -> Self {
        Self::from_f64(0.0)
    }
}

macro_rules! with_dtype_int {
    ($t:ty, $d:ident) => {
        impl WithDType for $t {
            const DTYPE: DType = DType::$d;
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
        }
    };
}
with_dtype_int!(u8, U8);
with_dtype_int!(u32, U32);
with_dtype_int!(i64, I64);

impl WithDType for bool {
    const DTYPE: DType = DType::Bool;
    fn to_f64(self) -> f64 {
        if self {
            1.0
        } else {
            0.0
        }
    }
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
}

impl WithDType for f32 {
    const DTYPE: DType = DType::F32;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl WithDType for f64 {
    const DTYPE: DType = DType::F64;
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
}

impl WithDType for bf16 {
    const DTYPE: DType = DType::BF16;
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        // Through f32, as the CUDA kernels do: `half`'s direct f64 conversion mis-rounds some
        // near-ties, and one rounding rule on both devices keeps parity exact.
        bf16::from_f32(v as f32)
    }
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

impl WithDType for f16 {
    const DTYPE: DType = DType::F16;
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        f16::from_f32(v as f32)
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
}

#[cfg(test)]
mod tests {
    use super::DType::*;

    #[test]
    fn half_types_compute_in_f32_and_f64_in_f64() {
        let computed = [BF16, F16, F32, F64].map(|d| d.compute_dtype());
        assert_eq!(computed, [F32, F32, F32, F64]);
    }

    #[test]
    fn promotion_follows_pytorch() {
        assert_eq!(I64.promote(F32), F32);
        assert_eq!(BF16.promote(F32), F32);
        assert_eq!(BF16.promote(F16), F32);
        assert_eq!(U8.promote(I64), I64);
        assert_eq!(Bool.promote(U8), U8);
        assert_eq!(Bool.promote(BF16), BF16);
        assert_eq!(F64.promote(F32), F64);
    }
}
