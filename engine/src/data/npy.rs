//! NumPy `.npy` files (format versions 1, 2 and 3), read into tensors and written from them.
//!
//! Layout: the magic `\x93NUMPY`, a version, a little-endian header length (u16 in v1, u32
//! after), then a Python dict literal such as `{'descr': '<f4', 'fortran_order': False,
//! 'shape': (3, 4), }` padded with spaces to a 64-byte boundary, then the raw elements. The
//! header is parsed by hand rather than evaluated, and its shape and dtype must account for
//! exactly the bytes that follow before anything is decoded.

use super::in_file;
use super::untrusted::{checked_numel, decode, Cursor};
use super::Dataset;
use crate::{DType, Device, Error, Result, Tensor};
use half::f16;
use std::path::Path;

const MAGIC: &[u8] = b"\x93NUMPY";

impl Dataset {
    /// Features `[N, ...]` (flattened to `[N, F]`) and targets `[N]` from two `.npy` files;
    /// integer targets are class ids, float targets regression values.
    pub fn from_npy(features: impl AsRef<Path>, targets: impl AsRef<Path>) -> Result<Dataset> {
        Dataset::flattened(read_npy(features)?, read_npy(targets)?)
    }
}

/// Reads an `.npy` file; a format error names the file.
pub fn read_npy(path: impl AsRef<Path>) -> Result<Tensor> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    parse_npy(&bytes).map_err(|e| in_file(path, e))
}

/// Parses the bytes of a `.npy` file. NumPy types without a tensor dtype of their own widen
/// losslessly: int8/16/32 to i64, uint16 to u32, uint64 to i64 (values above i64::MAX are an
/// error).
pub fn parse_npy(bytes: &[u8]) -> Result<Tensor> {
    let mut c = Cursor::new("npy", bytes);
    if c.take(MAGIC.len(), "magic")? != MAGIC {
        return Err(Error::format(
            "npy",
            "not an .npy file: the magic \\x93NUMPY is missing",
        ));
    }
    let [major, _minor] = c.array::<2>("version")?;
    let header_len = match major {
        1 => u16::from_le_bytes(c.array("header length")?) as usize,
        2 | 3 => u32::from_le_bytes(c.array("header length")?) as usize,
        v => {
            return Err(Error::format(
                "npy",
                format!("unsupported format version {v}"),
            ))
        }
    };
    let header = std::str::from_utf8(c.take(header_len, "header")?)
        .map_err(|_| Error::format("npy", "the header is not valid text"))?;
    let header = Header::parse(header)?;
    let numel = checked_numel("npy", &header.shape)?;
    let data = c.payload(numel, header.elem.size)?;
    if header.fortran_order && header.shape.len() > 1 {
        // Column-major data is the row-major layout of the reversed shape; permuting the
        // dimensions back and copying gives the row-major tensor.
        let reversed: Vec<usize> = header.shape.iter().rev().copied().collect();
        let dims: Vec<isize> = (0..header.shape.len() as isize).rev().collect();
        return header
            .elem
            .decode(data, &reversed)?
            .permute(&dims)?
            .contiguous();
    }
    header.elem.decode(data, &header.shape)
}

/// One element type: the tensor dtype it reads as, and how it sits on disk.
#[derive(Clone, Copy, Debug)]
struct Elem {
    kind: u8,
    size: usize,
    big_endian: bool,
}

impl Elem {
    fn parse(descr: &str) -> Result<Elem> {
        let unsupported = || {
            Error::format(
                "npy",
                format!(
                    "dtype {descr:?} is not supported (expected bool, (u)int8-64 or float16/32/64)"
                ),
            )
        };
        let b = descr.as_bytes();
        let (&order, rest) = b.split_first().ok_or_else(unsupported)?;
        let (&kind, digits) = rest.split_first().ok_or_else(unsupported)?;
        let size: usize = std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse().ok())
            .ok_or_else(unsupported)?;
        let ok = matches!(
            (kind, size),
            (b'f', 2 | 4 | 8) | (b'i', 1 | 2 | 4 | 8) | (b'u', 1 | 2 | 4 | 8) | (b'b', 1)
        );
        let big_endian = match order {
            b'<' | b'|' => false,
            b'>' => true,
            b'=' => cfg!(target_endian = "big"),
            _ => return Err(unsupported()),
        };
        if !ok || (order == b'|' && size != 1) {
            return Err(unsupported());
        }
        Ok(Elem {
            kind,
            size,
            big_endian,
        })
    }

    fn decode(self, data: &[u8], shape: &[usize]) -> Result<Tensor> {
        macro_rules! read {
            ($t:ty, $n:literal) => {
                decode::<$n, $t>(
                    data,
                    if self.big_endian {
                        <$t>::from_be_bytes
                    } else {
                        <$t>::from_le_bytes
                    },
                )
            };
        }
        match (self.kind, self.size) {
            (b'f', 2) => {
                let bits = read!(u16, 2);
                Tensor::from_vec(
                    bits.into_iter().map(f16::from_bits).collect::<Vec<_>>(),
                    shape,
                )
            }
            (b'f', 4) => Tensor::from_vec(read!(f32, 4), shape),
            (b'f', 8) => Tensor::from_vec(read!(f64, 8), shape),
            (b'i', 1) => Tensor::from_vec(
                data.iter().map(|&b| b as i8 as i64).collect::<Vec<_>>(),
                shape,
            ),
            (b'i', 2) => Tensor::from_vec(widen(read!(i16, 2)), shape),
            (b'i', 4) => Tensor::from_vec(widen(read!(i32, 4)), shape),
            (b'i', 8) => Tensor::from_vec(read!(i64, 8), shape),
            (b'u', 1) => Tensor::from_vec(data.to_vec(), shape),
            (b'u', 2) => Tensor::from_vec(
                read!(u16, 2).into_iter().map(u32::from).collect::<Vec<_>>(),
                shape,
            ),
            (b'u', 4) => Tensor::from_vec(read!(u32, 4), shape),
            (b'u', 8) => {
                let v = read!(u64, 8)
                    .into_iter()
                    .map(|x| {
                        i64::try_from(x).map_err(|_| {
                            Error::format(
                                "npy",
                                format!("uint64 value {x} does not fit the i64 dtype"),
                            )
                        })
                    })
                    .collect::<Result<Vec<i64>>>()?;
                Tensor::from_vec(v, shape)
            }
            (b'b', 1) => {
                let v = data
                    .iter()
                    .map(|&b| match b {
                        0 | 1 => Ok(b == 1),
                        _ => Err(Error::format(
                            "npy",
                            format!("bool byte {b} is neither 0 nor 1"),
                        )),
                    })
                    .collect::<Result<Vec<bool>>>()?;
                Tensor::from_vec(v, shape)
            }
            _ => Err(Error::format("npy", "unsupported dtype")),
        }
    }
}

fn widen<T: Into<i64>>(v: Vec<T>) -> Vec<i64> {
    v.into_iter().map(Into::into).collect()
}

/// The three keys of the header dict.
struct Header {
    elem: Elem,
    fortran_order: bool,
    shape: Vec<usize>,
}

impl Header {
    fn parse(text: &str) -> Result<Header> {
        let mut p = DictParser {
            s: text.as_bytes(),
            pos: 0,
        };
        let (mut elem, mut fortran, mut shape) = (None, None, None);
        p.expect(b'{')?;
        loop {
            if p.eat(b'}') {
                break;
            }
            let key = p.string()?;
            p.expect(b':')?;
            match key {
                "descr" => elem = Some(Elem::parse(p.string()?)?),
                "fortran_order" => fortran = Some(p.boolean()?),
                "shape" => shape = Some(p.tuple()?),
                other => return Err(bad_header(format!("unexpected key {other:?}"))),
            }
            if !p.eat(b',') {
                p.expect(b'}')?;
                break;
            }
        }
        p.skip_ws();
        if p.pos != p.s.len() {
            return Err(bad_header("text after the closing brace".into()));
        }
        match (elem, fortran, shape) {
            (Some(elem), Some(fortran_order), Some(shape)) => Ok(Header {
                elem,
                fortran_order,
                shape,
            }),
            _ => Err(bad_header(
                "it needs the keys 'descr', 'fortran_order' and 'shape'".into(),
            )),
        }
    }
}

fn bad_header(msg: String) -> Error {
    Error::format("npy", format!("bad header dict: {msg}"))
}

/// Just enough of Python's literal syntax for the header: quoted strings, True/False and
/// tuples of non-negative integers.
struct DictParser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl<'a> DictParser<'a> {
    fn skip_ws(&mut self) {
        while self
            .s
            .get(self.pos)
            .is_some_and(|b| b.is_ascii_whitespace())
        {
            self.pos += 1;
        }
    }

    /// Skips whitespace, then consumes `b` if it is next.
    fn eat(&mut self, b: u8) -> bool {
        self.skip_ws();
        let hit = self.s.get(self.pos) == Some(&b);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn expect(&mut self, b: u8) -> Result<()> {
        if self.eat(b) {
            Ok(())
        } else {
            Err(bad_header(format!(
                "expected {:?} at offset {}",
                b as char, self.pos
            )))
        }
    }

    fn string(&mut self) -> Result<&'a str> {
        self.skip_ws();
        let quote = match self.s.get(self.pos) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => {
                return Err(bad_header(format!(
                    "expected a quoted string at offset {}",
                    self.pos
                )))
            }
        };
        let start = self.pos + 1;
        let len = self.s[start..]
            .iter()
            .position(|&b| b == quote)
            .ok_or_else(|| bad_header("unterminated string".into()))?;
        self.pos = start + len + 1;
        std::str::from_utf8(&self.s[start..start + len])
            .map_err(|_| bad_header("a string is not valid text".into()))
    }

    fn boolean(&mut self) -> Result<bool> {
        self.skip_ws();
        for (word, value) in [(&b"True"[..], true), (&b"False"[..], false)] {
            if self.s[self.pos..].starts_with(word) {
                self.pos += word.len();
                return Ok(value);
            }
        }
        Err(bad_header("fortran_order must be True or False".into()))
    }

    fn tuple(&mut self) -> Result<Vec<usize>> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        loop {
            if self.eat(b')') {
                return Ok(dims);
            }
            // A header line is short, so the dims it can hold are few; still, refuse absurd
            // ranks instead of growing a list from the file.
            if dims.len() >= 64 {
                return Err(bad_header("the shape has more than 64 dimensions".into()));
            }
            dims.push(self.integer()?);
            if !self.eat(b',') {
                self.expect(b')')?;
                return Ok(dims);
            }
        }
    }

    fn integer(&mut self) -> Result<usize> {
        self.skip_ws();
        let start = self.pos;
        while self.s.get(self.pos).is_some_and(u8::is_ascii_digit) {
            self.pos += 1;
        }
        let digits = std::str::from_utf8(&self.s[start..self.pos]).unwrap_or("");
        let value = digits
            .parse::<usize>()
            .map_err(|_| bad_header(format!("a shape entry at offset {start} is not a size")))?;
        // Python 2 wrote long integers with an L suffix.
        if self.s.get(self.pos) == Some(&b'L') {
            self.pos += 1;
        }
        Ok(value)
    }
}

// ----- writing -----

/// The bytes of a version 1.0 `.npy` file (2.0 when the header outgrows 64 KiB) holding `t`
/// in C order and little-endian.
pub fn npy_bytes(t: &Tensor) -> Result<Vec<u8>> {
    let t = t.to_device(Device::Cpu)?;
    let (descr, data) = match t.dtype() {
        DType::F32 => ("<f4", le_bytes(t.to_vec::<f32>()?, f32::to_le_bytes)),
        DType::F64 => ("<f8", le_bytes(t.to_vec::<f64>()?, f64::to_le_bytes)),
        DType::F16 => (
            "<f2",
            le_bytes(t.to_vec::<f16>()?, |x| x.to_bits().to_le_bytes()),
        ),
        DType::I64 => ("<i8", le_bytes(t.to_vec::<i64>()?, i64::to_le_bytes)),
        DType::U32 => ("<u4", le_bytes(t.to_vec::<u32>()?, u32::to_le_bytes)),
        DType::U8 => ("|u1", t.to_vec::<u8>()?),
        DType::Bool => (
            "|b1",
            t.to_vec::<bool>()?.into_iter().map(u8::from).collect(),
        ),
        dtype => {
            return Err(Error::UnsupportedDType {
                op: "npy",
                dtype,
                detail: ": NumPy has no bfloat16; convert to f32 first".into(),
            })
        }
    };
    let shape = match t.shape() {
        [] => "()".to_string(),
        [n] => format!("({n},)"),
        dims => format!(
            "({})",
            dims.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // NumPy aligns the data to 64 bytes and ends the header with a newline.
    let padded_with = |prefix: usize| (prefix + header.len() + 1).div_ceil(64) * 64;
    let prefix = if padded_with(10) - 10 <= u16::MAX as usize {
        10
    } else {
        12
    };
    let padded = padded_with(prefix);
    header.push_str(&" ".repeat(padded - prefix - header.len() - 1));
    header.push('\n');
    let mut out = Vec::with_capacity(padded + data.len());
    out.extend_from_slice(MAGIC);
    if prefix == 10 {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&data);
    Ok(out)
}

pub fn write_npy(path: impl AsRef<Path>, t: &Tensor) -> Result<()> {
    std::fs::write(path.as_ref(), npy_bytes(t)?).map_err(|e| Error::io(path.as_ref(), e))
}

fn le_bytes<T, const N: usize>(v: Vec<T>, f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    v.into_iter().flat_map(f).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v1 file with a hand-written header dict and raw data bytes.
    fn file(dict: &str, data: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        out.extend_from_slice(dict.as_bytes());
        out.extend_from_slice(data);
        out
    }

    fn f32_bytes(v: &[f32], big: bool) -> Vec<u8> {
        v.iter()
            .flat_map(|x| {
                if big {
                    x.to_be_bytes()
                } else {
                    x.to_le_bytes()
                }
            })
            .collect()
    }

    #[test]
    fn every_writable_dtype_round_trips() {
        let tensors = [
            Tensor::from_vec(vec![1.5f32, -2.0, 3.25, 0.0, 7.0, 8.0], &[2, 3]).unwrap(),
            Tensor::from_vec(vec![1.5f64, -2.0], &[2]).unwrap(),
            Tensor::from_vec(vec![f16::from_f32(0.5), f16::from_f32(-4.0)], &[2, 1]).unwrap(),
            Tensor::from_vec(vec![i64::MIN, 0, i64::MAX], &[3]).unwrap(),
            Tensor::from_vec(vec![0u32, u32::MAX], &[1, 2]).unwrap(),
            Tensor::from_vec(vec![0u8, 255, 7], &[3, 1, 1]).unwrap(),
            Tensor::from_vec(vec![true, false], &[2]).unwrap(),
            Tensor::from_vec(vec![4.0f32], &[]).unwrap(),
            Tensor::from_vec(Vec::<f32>::new(), &[0, 3]).unwrap(),
        ];
        for t in tensors {
            let bytes = npy_bytes(&t).unwrap();
            assert_eq!(
                (bytes.len() - t.numel() * t.dtype().size_in_bytes()) % 64,
                0
            );
            let back = parse_npy(&bytes).unwrap();
            assert_eq!((back.shape(), back.dtype()), (t.shape(), t.dtype()));
            assert_eq!(back.to_vec_f64().unwrap(), t.to_vec_f64().unwrap());
        }
    }

    #[test]
    fn writing_bf16_is_refused_with_a_hint() {
        let t = Tensor::zeros(&[2], DType::BF16, Device::Cpu).unwrap();
        assert!(npy_bytes(&t).unwrap_err().to_string().contains("bfloat16"));
    }

    #[test]
    fn narrow_integers_widen_to_i64() {
        let d = [255u8, 255, 255, 255, 7, 0, 0, 0];
        let t = parse_npy(&file(
            "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }",
            &d,
        ))
        .unwrap();
        assert_eq!(t.dtype(), DType::I64);
        assert_eq!(t.to_vec::<i64>().unwrap(), [-1, 7]);
        let t = parse_npy(&file(
            "{'descr': '|i1', 'fortran_order': False, 'shape': (1,)}",
            &[0xFE],
        ))
        .unwrap();
        assert_eq!(t.to_vec::<i64>().unwrap(), [-2]);
    }

    #[test]
    fn big_endian_data_is_byte_swapped() {
        let d = f32_bytes(&[1.0, -2.5], true);
        let t = parse_npy(&file(
            "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }",
            &d,
        ))
        .unwrap();
        assert_eq!(t.to_vec::<f32>().unwrap(), [1.0, -2.5]);
    }

    #[test]
    fn fortran_order_is_transposed_into_row_major() {
        // The 2x3 matrix [[1, 2, 3], [4, 5, 6]] stored column by column.
        let d = f32_bytes(&[1., 4., 2., 5., 3., 6.], false);
        let t = parse_npy(&file(
            "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
            &d,
        ))
        .unwrap();
        assert_eq!(t.shape(), &[2, 3]);
        assert_eq!(t.to_vec::<f32>().unwrap(), [1., 2., 3., 4., 5., 6.]);
    }

    #[test]
    fn header_keys_may_come_in_any_order_with_double_quotes() {
        let d = f32_bytes(&[3.0], false);
        let t = parse_npy(&file(
            "{\"shape\": (), \"fortran_order\": False, \"descr\": \"<f4\"}   \n",
            &d,
        ))
        .unwrap();
        assert_eq!(t.shape(), &[] as &[usize]);
        assert_eq!(t.item().unwrap(), 3.0);
    }

    #[test]
    fn versions_two_and_three_use_a_four_byte_header_length() {
        for version in [2u8, 3] {
            let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }";
            let mut b = MAGIC.to_vec();
            b.extend_from_slice(&[version, 0]);
            b.extend_from_slice(&(dict.len() as u32).to_le_bytes());
            b.extend_from_slice(dict.as_bytes());
            b.extend_from_slice(&2.0f32.to_le_bytes());
            assert_eq!(parse_npy(&b).unwrap().to_vec::<f32>().unwrap(), [2.0]);
        }
    }

    #[test]
    fn a_shape_larger_than_the_data_is_refused_before_allocating() {
        let d = f32_bytes(&[1.0], false);
        let huge = "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967295, 4294967), }";
        let err = parse_npy(&file(huge, &d)).unwrap_err().to_string();
        assert!(
            err.contains("npy") && err.contains("4 bytes follow"),
            "{err}"
        );
        let overflow =
            "{'descr': '<f8', 'fortran_order': False, 'shape': (18446744073709551615, 3), }";
        assert!(parse_npy(&file(overflow, &d))
            .unwrap_err()
            .to_string()
            .contains("too large"));
        let short = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
        assert!(parse_npy(&file(short, &d)).is_err());
    }

    #[test]
    fn malformed_headers_are_format_errors() {
        let d = f32_bytes(&[1.0], false);
        for dict in [
            "{'descr': '<f4', 'fortran_order': False}",
            "{'descr': '<c8', 'fortran_order': False, 'shape': (1,)}",
            "{'descr': '|f4', 'fortran_order': False, 'shape': (1,)}",
            "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}",
            "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} trailing",
            "{'descr': '<f4",
        ] {
            match parse_npy(&file(dict, &d)) {
                Err(Error::Format { format: "npy", .. }) => {}
                other => panic!("{dict}: expected an npy format error, got {other:?}"),
            }
        }
        assert!(parse_npy(b"\x93NUMPY\x09\x00").is_err());
        assert!(parse_npy(b"PK\x03\x04").is_err());
        // A header length past the end of the file.
        assert!(parse_npy(b"\x93NUMPY\x01\x00\xff\xff{").is_err());
    }

    #[test]
    fn bool_bytes_other_than_zero_or_one_are_refused() {
        let dict = "{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }";
        assert!(parse_npy(&file(dict, &[1, 2])).is_err());
    }

    #[test]
    fn from_npy_pairs_feature_and_target_files() {
        let dir = std::env::temp_dir();
        let (fx, fy) = (
            dir.join(format!("rb_npy_x_{}.npy", std::process::id())),
            dir.join(format!("rb_npy_y_{}.npy", std::process::id())),
        );
        write_npy(
            &fx,
            &Tensor::from_vec(vec![1.0f64, 2., 3., 4.], &[2, 1, 2]).unwrap(),
        )
        .unwrap();
        write_npy(&fy, &Tensor::from_vec(vec![1i64, 0], &[2]).unwrap()).unwrap();
        let d = Dataset::from_npy(&fx, &fy).unwrap();
        std::fs::remove_file(&fx).unwrap();
        std::fs::remove_file(&fy).unwrap();
        assert_eq!(d.features().shape(), &[2, 2]);
        assert_eq!(d.features().dtype(), DType::F32);
        assert_eq!(d.targets().to_vec::<i64>().unwrap(), [1, 0]);
    }

    #[test]
    fn a_format_error_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("features.npy");
        std::fs::write(&path, b"\x93NUMPY\x01\x00").unwrap();
        let msg = read_npy(&path).unwrap_err().to_string();
        assert!(
            msg.starts_with(&format!("npy: {}: ", path.display())),
            "{msg}"
        );
    }
}
