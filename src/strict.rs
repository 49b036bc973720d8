//! Strict reading of JSON objects: every key must be known, integers must be JSON integers
//! (never `true`, `"5"` or `2.0`), and every failure names the field and the rule.
//! Used by the owner config (paths like `commands.stream.argv`) and by tool arguments.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// JSON text as a value, refusing an object that gives a key twice: `serde_json` keeps the
/// last, so a config with two `commands` would lose the first without a word. The error
/// names the key, its line and column. A byte order mark some editors put first is not
/// part of the text.
pub fn parse_unique(text: &str) -> Result<Value, serde_json::Error> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    serde_json::from_str::<Unique>(text).map(|unique| unique.0)
}

/// A value whose objects, at every depth, hold each key once.
struct Unique(Value);

impl<'de> Deserialize<'de> for Unique {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueVisitor).map(Unique)
    }
}

struct UniqueVisitor;

impl<'de> Visitor<'de> for UniqueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Unique(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "the key `{key}` is given twice in one object"
                )));
            }
            let Unique(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// The value as an integer in `min..=max`, refusing booleans, strings and floats.
pub fn uint_in(value: &Value, min: u64, max: u64) -> Option<u64> {
    value.as_u64().filter(|n| (min..=max).contains(n))
}

/// A short description of a JSON value's type for error messages.
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        // serde_json reads an integer past 64 bits as a float: beyond every integer a field
        // takes (at most 2^63 - 1). A whole number written with a point or an exponent is
        // not in an integer's form.
        Value::Number(n) if n.is_f64() && n.as_f64().is_some_and(|f| f.fract() == 0.0) => {
            if n.as_f64()
                .is_some_and(|f| f.abs() >= 9_223_372_036_854_775_808.0)
            {
                "a number out of range"
            } else {
                "a whole number written as a float"
            }
        }
        Value::Number(n) if n.is_f64() => "a non-integer number",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Reads the fields of one JSON object, remembering which keys were asked for so that
/// `finish` can refuse the rest.
pub struct Fields<'a> {
    map: &'a Map<String, Value>,
    path: String,
    known: Vec<&'static str>,
}

impl<'a> Fields<'a> {
    pub fn new(value: &'a Value, path: &str) -> Result<Self, String> {
        match value {
            Value::Object(map) => Ok(Fields {
                map,
                path: path.to_owned(),
                known: Vec::new(),
            }),
            other => Err(format!(
                "`{}`: must be an object, got {}",
                display_path(path),
                type_name(other)
            )),
        }
    }

    pub fn path_of(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// The value under `key`, `None` when absent. Explicit `null` counts as absent.
    pub fn get(&mut self, key: &'static str) -> Option<&'a Value> {
        self.known.push(key);
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub fn uint(&mut self, key: &'static str, min: u64, max: u64) -> Result<Option<u64>, String> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        uint_in(value, min, max).map(Some).ok_or_else(|| {
            format!(
                "`{}`: must be an integer from {min} to {max}, got {}",
                self.path_of(key),
                describe(value)
            )
        })
    }

    pub fn string(&mut self, key: &'static str) -> Result<Option<&'a str>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(format!(
                "`{}`: must be a string, got {}",
                self.path_of(key),
                type_name(other)
            )),
        }
    }

    pub fn array(&mut self, key: &'static str) -> Result<Option<&'a Vec<Value>>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(other) => Err(format!(
                "`{}`: must be an array, got {}",
                self.path_of(key),
                type_name(other)
            )),
        }
    }

    pub fn object(&mut self, key: &'static str) -> Result<Option<&'a Map<String, Value>>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(other) => Err(format!(
                "`{}`: must be an object, got {}",
                self.path_of(key),
                type_name(other)
            )),
        }
    }

    /// Refuse any key that was never asked for.
    pub fn finish(self) -> Result<(), String> {
        match self.map.keys().find(|k| !self.known.contains(&k.as_str())) {
            None => Ok(()),
            Some(unknown) => {
                let mut known = self.known.clone();
                known.sort_unstable();
                Err(format!(
                    "`{}`: unknown field; known fields here: {}",
                    self.path_of(unknown),
                    known.join(", ")
                ))
            }
        }
    }
}

fn display_path(path: &str) -> &str {
    if path.is_empty() { "(top level)" } else { path }
}

/// A value for an error message: short values verbatim, the rest by type.
pub fn describe(value: &Value) -> String {
    let text = value.to_string();
    if value.is_null() {
        text
    } else if text.len() <= 40 {
        format!("{} {text}", type_name(value))
    } else {
        type_name(value).to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_key_given_twice_is_refused_at_any_depth_and_the_rest_reads_as_serde_json_does() {
        let text = r#"{"a": [1, -2, 18446744073709551615, 1e300, 2.5, 1.0, null, true,
            "\u00e9\ud83d\ude00\n", {"b": {}, "c": []}], "d": {"a": 1}}"#;
        let plain: Value = serde_json::from_str(text).unwrap();
        assert_eq!(parse_unique(text).unwrap(), plain);
        for twice in [
            r#"{"a": 1, "a": 1}"#,
            r#"{"x": [{"k": 1, "j": 2, "k": 3}]}"#,
            r#"{"x": {"y": {"\u006b": 1, "k": 2}}}"#,
        ] {
            let err = parse_unique(twice).unwrap_err().to_string();
            assert!(
                err.contains("is given twice in one object at line 1"),
                "{twice}: {err}"
            );
        }
        assert!(parse_unique(r#"{"a": 1} x"#).is_err(), "trailing text");
        assert_eq!(parse_unique("\u{feff}{\"a\": 1}").unwrap(), json!({"a": 1}));
    }

    #[test]
    fn integers_are_strict() {
        for bad in [json!(true), json!("5"), json!(2.0), json!(-1), json!(2.5)] {
            assert_eq!(uint_in(&bad, 0, 10), None, "{bad}");
        }
        assert_eq!(uint_in(&json!(5), 0, 10), Some(5));
        assert_eq!(uint_in(&json!(11), 0, 10), None);
    }

    #[test]
    fn unknown_keys_are_named_with_their_path() {
        let v = json!({"a": 1, "typo": 2});
        let mut f = Fields::new(&v, "commands.x").unwrap();
        assert_eq!(f.uint("a", 0, 5).unwrap(), Some(1));
        let err = f.finish().unwrap_err();
        assert!(err.contains("`commands.x.typo`: unknown field"), "{err}");
    }

    #[test]
    fn range_errors_name_field_range_and_value() {
        let v = json!({"n": 2.5});
        let mut f = Fields::new(&v, "").unwrap();
        let err = f.uint("n", 1, 64).unwrap_err();
        assert_eq!(
            err,
            "`n`: must be an integer from 1 to 64, got a non-integer number 2.5"
        );
    }

    #[test]
    fn an_integer_beyond_64_bits_is_out_of_range() {
        let v: Value = serde_json::from_str(r#"{"n": 18446744073709551616}"#).unwrap();
        let mut f = Fields::new(&v, "").unwrap();
        let err = f.uint("n", 1, 64).unwrap_err();
        assert!(err.contains("got a number out of range"), "{err}");
        assert_eq!(type_name(&json!(1e20)), "a number out of range");
        assert_eq!(type_name(&json!(2.5)), "a non-integer number");
        assert_eq!(
            type_name(&json!(1000.0)),
            "a whole number written as a float"
        );
        assert_eq!(
            type_name(&json!(9.21e18)),
            "a whole number written as a float"
        );
    }

    #[test]
    fn a_value_is_named_once_by_type_and_shown_when_short() {
        assert_eq!(describe(&json!(null)), "null");
        assert_eq!(describe(&json!(true)), "a boolean true");
        assert_eq!(describe(&json!("x".repeat(50))), "a string");
    }
}
