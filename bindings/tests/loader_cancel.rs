//! Ctrl-C (the engine's cancel flag) stops a loader's pass between batches. A test binary of its
//! own, because the flag is process-wide and would stop other tests' loops.

use rhai::Map;
use rusting_brain::data::Dataset;
use rusting_brain::Tensor;
use rusting_brain_rhai::data::loader::rows;

#[test]
fn a_requested_cancel_ends_the_pass_with_an_error() {
    let x = Tensor::from_vec(vec![0f32; 10], &[10, 1]).unwrap();
    let y = Tensor::from_vec(vec![0i64; 10], &[10]).unwrap();
    let mut ds = Dataset::new(x, y).unwrap();
    let mut opts = Map::new();
    opts.insert("batch_size".into(), 2.into());
    let mut pass = rows(&mut ds, opts).unwrap().into_iter();
    assert!(pass.next().unwrap().is_ok());
    rusting_brain::cancel::request();
    let err = pass.next().unwrap().unwrap_err();
    rusting_brain::cancel::clear();
    // Terminated, as Rhai's own progress hook stops a script, which the REPL reports as
    // "interrupted".
    match &*err {
        rhai::EvalAltResult::ErrorTerminated(why, _) => assert_eq!(why.to_string(), "cancelled"),
        other => panic!("expected a termination, got {other:?}"),
    }
    assert!(pass.next().is_none(), "the pass stays stopped");
}
