//! Options passed as Rhai object maps (`#{ lr: 3e-4, weight_decay: 0.1 }`). An unknown key is an
//! error that lists the valid keys, so a typo never silently falls back to a default.
//!
//! Each function's options are one typed struct declared with [`options!`](crate::options!): a
//! key is written once, as a field with its type and default, and the struct's `parse` checks the
//! keys, converts every value (an error names the function, the key and the type it wanted) and
//! fills the defaults.

use crate::convert::number;
use crate::error::{runtime_error, RhaiResult};
use rhai::{Dynamic, Map, INT};

/// One function's option map, its keys checked. Only the `parse` that [`options!`](crate::options!)
/// writes uses it: `new` refuses unknown keys, `value` converts one key's value.
pub struct Options<'a> {
    what: &'a str,
    map: Map,
}

impl<'a> Options<'a> {
    /// The map of `what` (the function, as errors name it), refused with a did-you-mean and the
    /// list of `valid` keys when it has another key.
    pub fn new(what: &'a str, map: Map, valid: &[&str]) -> RhaiResult<Self> {
        let unknown: Vec<&str> = map
            .keys()
            .map(|k| k.as_str())
            .filter(|k| !valid.contains(k))
            .collect();
        if !unknown.is_empty() {
            let hint = match crate::suggest::did_you_mean(unknown[0], valid.iter().copied()) {
                Some(near) => format!(" (did you mean `{near}`?)"),
                None => String::new(),
            };
            return Err(runtime_error(format!(
                "{what}: unknown option{} {}{hint}; valid options: {}",
                if unknown.len() > 1 { "s" } else { "" },
                unknown.join(", "),
                valid.join(", ")
            )));
        }
        Ok(Options { what, map })
    }

    /// The value of `key`, None when it is absent or `()`.
    fn get(&self, key: &str) -> Option<&Dynamic> {
        self.map.get(key).filter(|v| !v.is_unit())
    }

    /// The option `key` converted to `T`, or None when it is absent or `()`.
    pub fn value<T: OptionValue>(&self, key: &str) -> RhaiResult<Option<T>> {
        self.get(key)
            .map(|v| T::from_option(v, &format!("{} option {key}", self.what)))
            .transpose()
    }
}

/// An integer or `[a, b]`, as kernel sizes and strides are given (positional kernel
/// arguments, and the `(usize, usize)` options).
pub fn pair(v: &Dynamic, what: &str) -> RhaiResult<(usize, usize)> {
    let bad = || runtime_error(format!("{what}: expected a non-negative integer or [a, b]"));
    if let Ok(i) = v.as_int() {
        let u = usize::try_from(i).map_err(|_| bad())?;
        return Ok((u, u));
    }
    let arr = v.read_lock::<rhai::Array>().ok_or_else(bad)?;
    match arr.as_slice() {
        [a, b] => {
            let a = usize::try_from(a.as_int().map_err(|_| bad())?).map_err(|_| bad())?;
            let b = usize::try_from(b.as_int().map_err(|_| bad())?).map_err(|_| bad())?;
            Ok((a, b))
        }
        _ => Err(bad()),
    }
}

/// A value an option may hold: how a Rhai value becomes it, with an error naming the option
/// (`what` is "nn::linear option bias").
pub trait OptionValue: Sized {
    fn from_option(v: &Dynamic, what: &str) -> RhaiResult<Self>;
}

impl OptionValue for f64 {
    fn from_option(v: &Dynamic, what: &str) -> RhaiResult<Self> {
        number(v, what)
    }
}

impl OptionValue for f32 {
    fn from_option(v: &Dynamic, what: &str) -> RhaiResult<Self> {
        number(v, what).map(|x| x as f32)
    }
}

impl OptionValue for INT {
    fn from_option(v: &Dynamic, what: &str) -> RhaiResult<Self> {
        v.as_int()
            .map_err(|t| runtime_error(format!("{what}: expected an integer, got {t}")))
    }
}

/// Non-negative integers of every width a kernel or config takes.
macro_rules! unsigned_option {
    ($($t:ty),*) => {$(
        impl OptionValue for $t {
            fn from_option(v: &Dynamic, what: &str) -> RhaiResult<Self> {
                let i = INT::from_option(v, what)?;
                <$t>::try_from(i).map_err(|_| {
                    runtime_error(format!("{what}: expected a non-negative integer, got {i}"))
                })
            }
        }
    )*};
}
unsigned_option!(usize, u64, u32);

impl OptionValue for bool {
    fn from_option(v: &Dynamic, what: &str) -> RhaiResult<Self> {
        v.as_bool()
            .map_err(|t| runtime_error(format!("{what}: expected true or false, got {t}")))
    }
}

impl OptionValue for String {
    fn from_option(v: &Dynamic, what: &str) -> RhaiResult<Self> {
        v.clone()
            .into_string()
            .map_err(|t| runtime_error(format!("{what}: expected a string, got {t}")))
    }
}

/// An integer or `[a, b]`, as kernel sizes and strides are given.
impl OptionValue for (usize, usize) {
    fn from_option(v: &Dynamic, what: &str) -> RhaiResult<Self> {
        pair(v, what)
    }
}

/// Two numbers `[a, b]` (Adam's betas).
impl OptionValue for (f64, f64) {
    fn from_option(v: &Dynamic, what: &str) -> RhaiResult<Self> {
        let bad = || runtime_error(format!("{what}: expected [a, b] with two numbers"));
        let arr = v.read_lock::<rhai::Array>().ok_or_else(bad)?;
        match arr.as_slice() {
            [a, b] => Ok((number(a, what)?, number(b, what)?)),
            _ => Err(bad()),
        }
    }
}

/// One string or an array of them (`targets: "q_proj"` or `targets: ["q_proj", "v_proj"]`).
impl OptionValue for Vec<String> {
    fn from_option(v: &Dynamic, what: &str) -> RhaiResult<Self> {
        crate::text::strings(v, what)
    }
}

/// A value the function reads itself (a tensor, a string or a list, a map).
impl OptionValue for Dynamic {
    fn from_option(v: &Dynamic, _what: &str) -> RhaiResult<Self> {
        Ok(v.clone())
    }
}

/// Values a script passes as they are (a tensor, a tokenizer, an optimizer), each with the
/// name an error gives it.
macro_rules! handle_option {
    ($($t:ty => $name:literal),* $(,)?) => {$(
        impl OptionValue for $t {
            fn from_option(v: &Dynamic, what: &str) -> RhaiResult<Self> {
                v.clone().try_cast::<$t>().ok_or_else(|| {
                    runtime_error(format!("{what}: expected {}, got {}", $name, v.type_name()))
                })
            }
        }
    )*};
}
handle_option!(
    rusting_brain::Tensor => "a Tensor",
    rusting_brain::text::Tokenizer => "a Tokenizer",
    crate::optim::Optim => "an Optimizer",
);

impl OptionValue for rhai::Array {
    fn from_option(v: &Dynamic, what: &str) -> RhaiResult<Self> {
        v.clone()
            .into_array()
            .map_err(|t| runtime_error(format!("{what}: expected an array, got {t}")))
    }
}

impl OptionValue for Map {
    fn from_option(v: &Dynamic, what: &str) -> RhaiResult<Self> {
        v.clone()
            .try_cast::<Map>()
            .ok_or_else(|| runtime_error(format!("{what}: expected a map, got {}", v.type_name())))
    }
}

/// Declares one function's options as a struct. `name: T = default` is a `T` that takes the
/// default when the key is absent (a default may use the fields above it); `name: T` is an
/// `Option<T>`. `parse(what, map)` refuses unknown keys (listing `KEYS`) and converts the rest:
///
/// ```ignore
/// options! {
///     struct PoolOptions {
///         kernel: (usize, usize) = (2, 2),
///         stride: (usize, usize) = kernel,
///         seed: u64,
///     }
/// }
/// let o = PoolOptions::parse("nn::max_pool2d", map)?;
/// ```
#[macro_export]
macro_rules! options {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $( $(#[$field_meta:meta])* $field:ident : $ty:ty $(= $default:expr)? ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $( $(#[$field_meta])* pub $field: $crate::options!(@type $ty $(, $default)?), )*
        }

        impl $name {
            /// The keys this function takes, as its errors list them.
            #[allow(dead_code)]
            pub const KEYS: &'static [&'static str] = &[$(stringify!($field)),*];

            pub fn parse(what: &str, map: ::rhai::Map) -> $crate::error::RhaiResult<Self> {
                let o = $crate::options::Options::new(what, map, Self::KEYS)?;
                $( let $field = $crate::options!(@value o, $field, $ty $(, $default)?); )*
                Ok($name { $($field),* })
            }
        }
    };
    (@type $ty:ty, $default:expr) => { $ty };
    (@type $ty:ty) => { ::std::option::Option<$ty> };
    (@value $o:ident, $field:ident, $ty:ty, $default:expr) => {
        match $o.value::<$ty>(stringify!($field))? {
            Some(v) => v,
            None => $default,
        }
    };
    (@value $o:ident, $field:ident, $ty:ty) => { $o.value::<$ty>(stringify!($field))? };
}

#[cfg(test)]
mod tests {
    use rhai::{Dynamic, Map};

    crate::options! {
        struct PoolOptions {
            kernel: (usize, usize) = (2, 2),
            stride: (usize, usize) = kernel,
            ceil_mode: bool = false,
            seed: u64,
        }
    }

    fn map(pairs: &[(&str, Dynamic)]) -> Map {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), v.clone()))
            .collect()
    }

    #[test]
    fn absent_keys_take_their_defaults_and_a_default_may_use_a_field_above() {
        let o = PoolOptions::parse("nn::pool", map(&[("kernel", Dynamic::from_int(3))])).unwrap();
        assert_eq!(
            (o.kernel, o.stride, o.ceil_mode, o.seed),
            ((3, 3), (3, 3), false, None)
        );
        let unit = map(&[("seed", Dynamic::UNIT), ("stride", Dynamic::from_int(1))]);
        let o = PoolOptions::parse("nn::pool", unit).unwrap();
        assert_eq!((o.kernel, o.stride, o.seed), ((2, 2), (1, 1), None));
    }

    #[test]
    fn an_unknown_key_is_refused_with_the_nearest_and_every_valid_key() {
        let e = PoolOptions::parse("nn::pool", map(&[("strid", Dynamic::from_int(1))]))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("nn::pool: unknown option strid"), "{e}");
        assert!(e.contains("did you mean `stride`"), "{e}");
        assert!(e.contains("kernel, stride, ceil_mode, seed"), "{e}");
    }

    #[test]
    fn a_list_of_strings_may_be_one_string() {
        crate::options! {
            struct Names {
                targets: Vec<String> = Vec::new(),
            }
        }
        let one = Names::parse("lora", map(&[("targets", "q".into())])).unwrap();
        assert_eq!(one.targets, ["q"]);
        let arr: rhai::Array = vec!["q".into(), "v".into()];
        let two = Names::parse("lora", map(&[("targets", arr.into())])).unwrap();
        assert_eq!(two.targets, ["q", "v"]);
        assert!(Names::parse("lora", Map::new()).unwrap().targets.is_empty());
        let e = Names::parse("lora", map(&[("targets", Dynamic::from_int(1))]))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("lora option targets: expected a string or an array of strings"),
            "{e}"
        );
    }

    #[test]
    fn a_value_of_the_wrong_type_names_the_function_and_the_key() {
        let e = PoolOptions::parse("nn::pool", map(&[("seed", Dynamic::from_int(-1))]))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("nn::pool option seed: expected a non-negative integer"),
            "{e}"
        );
        let e = PoolOptions::parse("nn::pool", map(&[("ceil_mode", "yes".into())]))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("nn::pool option ceil_mode: expected true or false"),
            "{e}"
        );
    }
}
