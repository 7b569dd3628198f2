//! The tensor types of ggml (`enum ggml_type`): each type's code, name, and block geometry (how
//! many values one block holds and how many bytes it takes). Every type ggml defines is known
//! here, so a file's sizes can be checked whether or not its type can be dequantized; which
//! types can is `quants::can_dequantize`.

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GgmlType {
    pub code: u32,
    pub name: &'static str,
    /// Values in one block (1 for plain types).
    pub block_size: u64,
    /// Bytes of one block.
    pub type_size: u64,
}

/// Super-block length of the K-quants.
pub const QK_K: u64 = 256;

const fn t(code: u32, name: &'static str, block_size: u64, type_size: u64) -> GgmlType {
    GgmlType {
        code,
        name,
        block_size,
        type_size,
    }
}

pub const F32: GgmlType = t(0, "F32", 1, 4);
pub const F16: GgmlType = t(1, "F16", 1, 2);
pub const Q4_0: GgmlType = t(2, "Q4_0", 32, 2 + 16);
pub const Q4_1: GgmlType = t(3, "Q4_1", 32, 2 + 2 + 16);
pub const Q5_0: GgmlType = t(6, "Q5_0", 32, 2 + 4 + 16);
pub const Q5_1: GgmlType = t(7, "Q5_1", 32, 2 + 2 + 4 + 16);
pub const Q8_0: GgmlType = t(8, "Q8_0", 32, 2 + 32);
pub const Q4_K: GgmlType = t(12, "Q4_K", QK_K, 2 + 2 + 12 + QK_K / 2);
pub const Q5_K: GgmlType = t(13, "Q5_K", QK_K, 2 + 2 + 12 + QK_K / 8 + QK_K / 2);
pub const Q6_K: GgmlType = t(14, "Q6_K", QK_K, QK_K / 2 + QK_K / 4 + QK_K / 16 + 2);
pub const BF16: GgmlType = t(30, "BF16", 1, 2);

/// Every type of `enum ggml_type`; codes 4, 5, 31-33 and 36-38 were removed from the format.
const ALL: &[GgmlType] = &[
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    t(9, "Q8_1", 32, 4 + 4 + 32),
    t(10, "Q2_K", QK_K, 2 + 2 + QK_K / 16 + QK_K / 4),
    t(11, "Q3_K", QK_K, 2 + QK_K / 4 + QK_K / 8 + 12),
    Q4_K,
    Q5_K,
    Q6_K,
    t(15, "Q8_K", QK_K, 4 + QK_K + QK_K / 8),
    t(16, "IQ2_XXS", QK_K, 2 + QK_K / 4),
    t(17, "IQ2_XS", QK_K, 2 + QK_K / 4 + QK_K / 32),
    t(18, "IQ3_XXS", QK_K, 2 + QK_K / 4 + QK_K / 8),
    t(19, "IQ1_S", QK_K, 2 + QK_K / 8 + QK_K / 16),
    t(20, "IQ4_NL", 32, 2 + 16),
    t(21, "IQ3_S", QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4),
    t(22, "IQ2_S", QK_K, 2 + QK_K / 4 + QK_K / 16),
    t(23, "IQ4_XS", QK_K, 2 + 2 + QK_K / 2 + QK_K / 64),
    t(24, "I8", 1, 1),
    t(25, "I16", 1, 2),
    t(26, "I32", 1, 4),
    t(27, "I64", 1, 8),
    t(28, "F64", 1, 8),
    t(29, "IQ1_M", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32),
    BF16,
    t(34, "TQ1_0", QK_K, 2 + 4 * 13),
    t(35, "TQ2_0", QK_K, 2 + 64),
    t(39, "MXFP4", 32, 1 + 16),
    t(40, "NVFP4", 64, 4 + 32),
    t(41, "Q1_0", 128, 2 + 16),
    t(42, "Q2_0", 64, 2 + 16),
];

impl GgmlType {
    pub fn from_code(code: u32) -> Option<GgmlType> {
        ALL.iter().copied().find(|t| t.code == code)
    }

    /// Bytes of a row of `n` values, if `n` is a whole number of blocks.
    pub fn row_bytes(self, n: u64) -> Option<u64> {
        if !n.is_multiple_of(self.block_size) {
            return None;
        }
        (n / self.block_size).checked_mul(self.type_size)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}
