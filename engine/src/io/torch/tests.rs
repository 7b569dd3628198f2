//! Unit tests of the torch reader: the pickle machine on small pickles, the allow-list, and
//! hostile input (truncation, cycles, expansion bombs) giving errors rather than panics.

use super::materialise::{Materialiser, NoStorages};
use super::pickle::Vm;
use super::storage::{build_tensor, ElemType, StorageRef, TensorSpec};
use super::{load_pt_bytes, Value};
use crate::Result;

/// Runs one pickle with no storages available.
fn unpickle(bytes: &[u8]) -> Result<Value> {
    let mut vm = Vm::new(bytes, "test.pkl");
    let root = vm.run(0)?;
    Materialiser::new(&vm, &mut NoStorages("test.pkl")).value(root)
}

fn err(bytes: &[u8]) -> String {
    unpickle(bytes).unwrap_err().to_string()
}

/// `pickle.dumps(obj, protocol=2)` of the dict checked by `check_mixed_dict`.
const MIXED_P2: &[u8] =
    b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01K\x01X\x01\x00\x00\x00bq\x02]q\x03(G?\xf8\x00\x00\
      \x00\x00\x00\x00\x88\x89Nc_codecs\x0aencode\x0aq\x04X\x02\x00\x00\x00xyq\x05X\x06\x00\
      \x00\x00latin1q\x06\x86q\x07Rq\x08K\x01K\x02K\x03\x87q\x09K\x04\x85q\x0aK\x05K\x06\x86q\
      \x0b)eX\x01\x00\x00\x00nq\x0cJ\xd4\xfe\xff\xffX\x01\x00\x00\x00kq\x0dM\xff\xffX\x03\x00\
      \x00\x00bigq\x0e\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00@X\x03\x00\x00\x00negq\x0f\x8a\
      \x06\x00\x00\x00\x00\x00\xffX\x01\x00\x00\x00uq\x10X\x02\x00\x00\x00\xc3\xa9q\x11X\x01\
      \x00\x00\x00sq\x12c__builtin__\x0aset\x0aq\x13]q\x14K\x07a\x85q\x15Rq\x16X\x01\x00\x00\
      \x00fq\x17c__builtin__\x0afrozenset\x0aq\x18]q\x19K\x08a\x85q\x1aRq\x1bX\x07\x00\x00\x00\
      shared1q\x1c]q\x1d(K\x01K\x02eX\x07\x00\x00\x00shared2q\x1eh\x1dK\x05X\x07\x00\x00\x00in\
      t keyq\x1fX\x02\x00\x00\x00odq ccollections\x0aOrderedDict\x0aq!)Rq\x22X\x01\x00\x00\x00\
      pq#K\x01su.";
/// The same dict at protocol 4 (FRAME, MEMOIZE, STACK_GLOBAL, EMPTY_SET, FROZENSET).
const MIXED_P4: &[u8] =
    b"\x80\x04\x95\xd9\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94K\x01\x8c\x01b\x94]\x94(G\
      ?\xf8\x00\x00\x00\x00\x00\x00\x88\x89NC\x02xy\x94K\x01K\x02K\x03\x87\x94K\x04\x85\x94K\
      \x05K\x06\x86\x94)e\x8c\x01n\x94J\xd4\xfe\xff\xff\x8c\x01k\x94M\xff\xff\x8c\x03big\x94\
      \x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00@\x8c\x03neg\x94\x8a\x06\x00\x00\x00\x00\x00\xff\
      \x8c\x01u\x94\x8c\x02\xc3\xa9\x94\x8c\x01s\x94\x8f\x94(K\x07\x90\x8c\x01f\x94(K\x08\x91\
      \x94\x8c\x07shared1\x94]\x94(K\x01K\x02e\x8c\x07shared2\x94h\x13K\x05\x8c\x07int key\x94\
      \x8c\x02od\x94\x8c\x0bcollections\x94\x8c\x0bOrderedDict\x94\x93\x94)R\x94\x8c\x01p\x94K\
      \x01su.";

/// `{'a': 1, 'b': [1.5, True, False, None, b'xy', (1, 2, 3), (4,), (5, 6), ()], 'n': -300,
/// 'k': 65535, 'big': 2**70, 'neg': -2**40, 'u': 'é', 's': {7}, 'f': frozenset({8}),
/// 'shared1': x, 'shared2': x, 5: 'int key', 'od': OrderedDict([('p', 1)])}` with x = [1, 2].
fn check_mixed_dict(v: &Value) {
    assert_eq!(v.get("a").and_then(Value::as_i64), Some(1));
    let b = v.get("b").and_then(Value::as_list).unwrap();
    assert_eq!(b[0].as_f64(), Some(1.5));
    assert_eq!((b[1].as_bool(), b[2].as_bool()), (Some(true), Some(false)));
    assert!(matches!(b[3], Value::None));
    assert!(matches!(&b[4], Value::Bytes(x) if x == b"xy"));
    let ints = |t: &Value| {
        t.as_list()
            .unwrap()
            .iter()
            .map(|i| i.as_i64().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(ints(&b[5]), [1, 2, 3]);
    assert_eq!(ints(&b[6]), [4]);
    assert_eq!(ints(&b[7]), [5, 6]);
    assert!(matches!(&b[8], Value::Tuple(t) if t.is_empty()));
    assert_eq!(v.get("n").and_then(Value::as_i64), Some(-300));
    assert_eq!(v.get("k").and_then(Value::as_i64), Some(65535));
    let mut big = vec![0u8; 9];
    big[8] = 0x40;
    assert!(matches!(v.get("big"), Some(Value::BigInt(b)) if *b == big));
    assert_eq!(v.get("neg").and_then(Value::as_i64), Some(-(1 << 40)));
    assert_eq!(v.get("u").and_then(Value::as_str), Some("é"));
    assert!(matches!(v.get("s"), Some(Value::Set(s)) if s.len() == 1 && s[0].as_i64() == Some(7)));
    assert!(matches!(v.get("f"), Some(Value::Set(s)) if s.len() == 1 && s[0].as_i64() == Some(8)));
    assert_eq!(ints(v.get("shared1").unwrap()), [1, 2]);
    assert_eq!(ints(v.get("shared2").unwrap()), [1, 2]);
    assert_eq!(v.get_int(5).and_then(Value::as_str), Some("int key"));
    assert_eq!(
        v.get("od").unwrap().get("p").and_then(Value::as_i64),
        Some(1)
    );
}

#[test]
fn protocol_2_opcodes() {
    check_mixed_dict(&unpickle(MIXED_P2).unwrap());
}

#[test]
fn protocol_4_and_5_opcodes() {
    check_mixed_dict(&unpickle(MIXED_P4).unwrap());
    let mut p5 = MIXED_P4.to_vec();
    p5[1] = 5;
    check_mixed_dict(&unpickle(&p5).unwrap());
}

#[test]
fn python2_strings_are_text_or_bytes() {
    // SHORT_BINSTRING 'ab', BINSTRING of invalid UTF-8, TUPLE2.
    let v = unpickle(b"\x80\x02U\x02abT\x01\x00\x00\x00\xff\x86.").unwrap();
    let items = v.as_list().unwrap();
    assert_eq!(items[0].as_str(), Some("ab"));
    assert!(matches!(&items[1], Value::Bytes(b) if b == &[0xff]));
}

#[test]
fn os_system_is_refused_by_name() {
    // GLOBAL 'os system', as a malicious pickle would call it.
    let e = err(b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R.");
    assert!(e.contains("`test.pkl`"), "{e}");
    assert!(
        e.contains("global `os.system` is not on the allow-list"),
        "{e}"
    );
}

#[test]
fn builtins_eval_is_refused_by_name() {
    // STACK_GLOBAL builtins.eval.
    let e = err(b"\x80\x04\x8c\x08builtins\x8c\x04eval\x93X\x01\x00\x00\x001\x85R.");
    assert!(
        e.contains("global `builtins.eval` is not on the allow-list"),
        "{e}"
    );
}

#[test]
fn allowed_data_global_cannot_be_called() {
    // torch.float16('x'): on the allow-list as data, but it is not a callable.
    let e = err(b"\x80\x02ctorch\nfloat16\nX\x01\x00\x00\x00x\x85R.");
    assert!(e.contains("`torch.float16` is data, not callable"), "{e}");
}

#[test]
fn module_classes_build_inert_objects() {
    // NEWOBJ of torch.nn.modules.linear.Linear, then BUILD with {'in_features': 3}.
    let v = unpickle(
        b"\x80\x02ctorch.nn.modules.linear\nLinear\n)\x81}X\x0b\x00\x00\x00in_featuresK\x03sb.",
    )
    .unwrap();
    assert_eq!(v.class_name(), Some("torch.nn.modules.linear.Linear"));
    assert_eq!(v.get("in_features").and_then(Value::as_i64), Some(3));
}

#[test]
fn memo_shares_containers_mutated_after_a_reference() {
    // a = []; b = [a]; then a.append(1): b, taken from the memo, must show a's new item.
    // EMPTY_LIST q0, EMPTY_LIST q1, BINGET 0, APPEND, POP, K1, APPEND, POP, BINGET 1, STOP.
    let v = unpickle(b"\x80\x02]q\x00]q\x01h\x00a0K\x01a0h\x01.").unwrap();
    let b = v.as_list().unwrap();
    let a = b[0].as_list().unwrap();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].as_i64(), Some(1));
}

#[test]
fn malformed_pickles_give_errors() {
    for (bytes, what) in [
        (&b"\x80\x02a."[..], "stack underflow"),
        (b"\x80\x02h\x07.", "memo key 7 is unset"),
        (b"\x80\x02e.", "no MARK"),
        (b"\x80\x02K\x01", "no STOP"),
        (b"\x80\x02X\xff\xff\xff\x7fab.", "truncated"),
        (b"\x80\x02K\x00K\x01K\x02s.", "SETITEM on a non-dict"),
        (b"\x80\x09.", "protocol 9"),
        (b"\x80\x02\xfe.", "unsupported pickle opcode 0xfe"),
        (b"\x80\x02K\x01(.", "stack underflow past a MARK"),
    ] {
        let e = err(bytes);
        assert!(e.contains(what), "{what}: {e}");
    }
}

#[test]
fn truncated_pickles_never_panic() {
    for bytes in [MIXED_P2, MIXED_P4] {
        for len in 0..bytes.len() {
            assert!(unpickle(&bytes[..len]).is_err(), "cut at {len}");
        }
    }
}

#[test]
fn self_reference_becomes_a_marker() {
    // l = []; l.append(l)
    let v = unpickle(b"\x80\x02]q\x00h\x00a.").unwrap();
    let items = v.as_list().unwrap();
    assert!(matches!(items, [Value::Recursive]), "{items:?}");
}

#[test]
fn deep_nesting_is_an_error() {
    // 2000 lists, each appended into the one below it.
    let mut p = b"\x80\x02".to_vec();
    p.extend(std::iter::repeat_n(b']', 2000));
    p.extend(std::iter::repeat_n(b'a', 1999));
    p.push(b'.');
    let e = err(&p);
    assert!(e.contains("nest deeper"), "{e}");
}

#[test]
fn shared_reference_bomb_is_an_error() {
    // a0 = []; a(i+1) = [a(i), a(i)] for 64 levels: 2^64 values once expanded.
    let mut p = b"\x80\x02]q\x00".to_vec();
    for i in 0..64u8 {
        p.extend_from_slice(&[b'h', i, b'h', i, 0x86, b'q', i + 1]);
    }
    p.push(b'.');
    let e = err(&p);
    assert!(e.contains("too many values"), "{e}");
}

/// An allowed object whose state is BUILT onto itself again and again: each 3-byte BUILD would
/// double the state, 64 of them past 2^64 entries. The copies are bounded by the pickle's size.
#[test]
fn a_state_built_onto_itself_is_an_error_not_an_abort() {
    // obj = argparse.Namespace(); state = {'a': 1}; BUILD(obj, state); then 64 x BUILD(state).
    let mut p = b"\x80\x02cargparse\nNamespace\n)\x81q\x00}q\x01X\x01\x00\x00\x00aK\x01sb".to_vec();
    for _ in 0..64 {
        p.extend_from_slice(b"h\x01b");
    }
    p.push(b'.');
    let e = err(&p);
    assert!(e.contains("copies more entries"), "{e}");
}

#[test]
fn not_a_torch_file() {
    let e = load_pt_bytes(b"GIF89a", "x.pt").unwrap_err().to_string();
    assert!(e.contains("`x.pt` is neither"), "{e}");
    // A pickle whose first value is not torch's magic number.
    let e = load_pt_bytes(b"\x80\x02K\x01.", "x.pt")
        .unwrap_err()
        .to_string();
    assert!(e.contains("bad magic number"), "{e}");
}

fn spec(
    elem: ElemType,
    numel: usize,
    offset: usize,
    size: &[usize],
    stride: &[usize],
) -> TensorSpec {
    TensorSpec {
        storage: StorageRef {
            key: "0".into(),
            elem,
            numel,
            view: None,
        },
        offset,
        size: size.to_vec(),
        stride: stride.to_vec(),
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn tensor_views_are_bounds_checked() {
    let data = f32_bytes(&[0.0, 1.0, 2.0, 3.0]);
    let cases = [
        spec(ElemType::F32, 4, 0, &[5], &[1]),
        spec(ElemType::F32, 4, 2, &[3], &[1]),
        spec(ElemType::F32, 4, 0, &[2, 2], &[3, 1]),
        spec(ElemType::F32, 4, 0, &[usize::MAX, 2], &[2, 1]),
    ];
    for s in cases {
        let e = build_tensor(&s, &data).unwrap_err();
        assert!(
            e.contains("reaches element") || e.contains("overflows"),
            "{e}"
        );
    }
    // A storage whose bytes do not match its declared length.
    let e = build_tensor(&spec(ElemType::F32, 5, 0, &[4], &[1]), &data).unwrap_err();
    assert!(e.contains("holds 16 bytes"), "{e}");
}

#[test]
fn tensor_views_honour_offset_and_stride() {
    let data = f32_bytes(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    // Columns 1..3 of a [2, 3] matrix: offset 1, size [2, 2], stride [3, 1].
    let t = build_tensor(&spec(ElemType::F32, 6, 1, &[2, 2], &[3, 1]), &data).unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), [1.0, 2.0, 4.0, 5.0]);
    // A broadcast (stride 0) view repeats one element.
    let t = build_tensor(&spec(ElemType::F32, 6, 4, &[3], &[0]), &data).unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), [4.0, 4.0, 4.0]);
}

#[test]
fn narrow_int_storages_widen_to_i64() {
    let data: Vec<u8> = [-2i32, 70000]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let t = build_tensor(&spec(ElemType::I32, 2, 0, &[2], &[1]), &data).unwrap();
    assert_eq!(t.to_vec::<i64>().unwrap(), [-2, 70000]);
}

#[test]
fn unsupported_storage_type_names_the_tensor() {
    let s = spec(ElemType::Unsupported("complex64"), 1, 0, &[1], &[1]);
    let e = super::storage::load_tensor(&s, &[0; 8], "m.pt", "layer.weight")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`m.pt`: tensor `layer.weight`") && e.contains("complex64"),
        "{e}"
    );
}
