//! `model.eval()`, as PyTorch users write it.
//!
//! Rhai reserves `eval`, and a method of that name cannot be called:
//! - as is, `m.eval()` is the parse error `Reserved("eval")`;
//! - with the keyword turned off (`Engine::disable_symbol("eval")`), `.eval` is the parse error
//!   `PropertyExpected`;
//! - handed to the parser as an identifier, `m.eval()` is refused by name: "'eval' should not be
//!   called in method style. Try eval(...);".
//!
//! So the word `eval` right after a `.` or `?.` reaches the parser as `eval_mode`, the method's
//! registered name. Everywhere else `eval` keeps Rhai's meaning.
//!
//! `nn::module(...)`, PyTorch's `nn.Module` written in the script, meets the same wall: Rhai
//! reserves `module` for itself. Right after `::` it reaches the parser as the identifier it is.

use rhai::{Engine, Token};
use std::cell::Cell;

thread_local! {
    /// The token before the one being mapped: `.` or `?.` (1), `::` (2), another (0). A script
    /// is tokenized on one thread, in order.
    static PREVIOUS: Cell<u8> = const { Cell::new(0) };
}

/// The registered name that `x.eval()` calls.
pub const EVAL_METHOD: &str = "eval_mode";

const AFTER_DOT: u8 = 1;
const AFTER_PATH: u8 = 2;

/// Makes `x.eval()` call `x.eval_mode()` and lets `nn::module` be a name.
pub fn method_eval(engine: &mut Engine) {
    // `on_parse_token` is marked deprecated only as a warning that the API is volatile.
    #[allow(deprecated)]
    engine.on_parse_token(|token, _pos, _state| {
        let kind = match token {
            Token::Period | Token::Elvis => AFTER_DOT,
            Token::DoubleColon => AFTER_PATH,
            _ => 0,
        };
        let previous = PREVIOUS.with(|c| c.replace(kind));
        match token {
            Token::Reserved(word) if previous == AFTER_DOT && word.as_str() == "eval" => {
                Token::Identifier(Box::new(EVAL_METHOD.into()))
            }
            Token::Reserved(word) if previous == AFTER_PATH && word.as_str() == "module" => {
                Token::Identifier(word)
            }
            other => other,
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> Engine {
        let mut e = Engine::new();
        method_eval(&mut e);
        e.register_fn(EVAL_METHOD, |x: &mut rhai::INT| *x = -*x);
        e
    }

    #[test]
    fn a_method_named_eval_calls_eval_mode() {
        assert_eq!(
            engine()
                .eval::<rhai::INT>("let x = 3; x.eval(); x")
                .unwrap(),
            -3
        );
        assert_eq!(
            engine()
                .eval::<rhai::INT>("let x = 3;\nx\n  .eval();\nx")
                .unwrap(),
            -3
        );
    }

    #[test]
    fn module_after_a_path_is_a_name() {
        let mut e = engine();
        let mut nn = rhai::Module::new();
        nn.set_native_fn("module", |x: rhai::INT| Ok(x + 1));
        e.register_static_module("nn", nn.into());
        assert_eq!(e.eval::<rhai::INT>("nn::module(1)").unwrap(), 2);
        assert!(e.compile("let module = 1;").is_err());
    }

    #[test]
    fn eval_as_a_function_keeps_its_meaning() {
        assert_eq!(engine().eval::<rhai::INT>("eval(\"1 + 2\")").unwrap(), 3);
        let err = engine().compile("let eval = 1;").unwrap_err();
        assert!(err.to_string().contains("eval"), "{err}");
    }
}
