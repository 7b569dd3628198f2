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

use rhai::{Engine, Token};
use std::cell::Cell;

thread_local! {
    /// Whether the token before the one being mapped was `.` or `?.`. A script is tokenized on
    /// one thread, in order.
    static AFTER_DOT: Cell<bool> = const { Cell::new(false) };
}

/// The registered name that `x.eval()` calls.
pub const EVAL_METHOD: &str = "eval_mode";

/// Makes `x.eval()` call `x.eval_mode()`.
pub fn method_eval(engine: &mut Engine) {
    // `on_parse_token` is marked deprecated only as a warning that the API is volatile.
    #[allow(deprecated)]
    engine.on_parse_token(|token, _pos, _state| {
        let after_dot =
            AFTER_DOT.with(|c| c.replace(matches!(token, Token::Period | Token::Elvis)));
        match token {
            Token::Reserved(word) if after_dot && word.as_str() == "eval" => {
                Token::Identifier(Box::new(EVAL_METHOD.into()))
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
    fn eval_as_a_function_keeps_its_meaning() {
        assert_eq!(engine().eval::<rhai::INT>("eval(\"1 + 2\")").unwrap(), 3);
        let err = engine().compile("let eval = 1;").unwrap_err();
        assert!(err.to_string().contains("eval"), "{err}");
    }
}
