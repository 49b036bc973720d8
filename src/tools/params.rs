//! Tool parameters declared once: each declaration yields both the JSON input schema the
//! client sees and the strict decoder that turns a bad argument into `INVALID_ARGUMENT`
//! naming the parameter and the accepted range.

use serde_json::{Map, Value, json};

use crate::errors::ToolError;
use crate::strict::{describe, type_name, uint_in};

#[derive(Debug, Clone)]
pub enum Kind {
    /// A string of `min..=max` characters.
    Str {
        min: usize,
        max: usize,
    },
    /// Any string (its size is checked by the tool, in bytes).
    Text,
    /// 32 lowercase hex digits.
    SessionId,
    Int {
        min: u64,
        max: u64,
        default: u64,
    },
    /// An integer in `min..=max` with no default: absent means the option is off.
    OptInt {
        min: u64,
        max: u64,
    },
    Bool,
    /// One of the listed strings.
    OneOf(&'static [&'static str]),
    /// An array of `min..=max` strings of at most `max_chars` characters each.
    StrList {
        min: usize,
        max: usize,
        max_chars: usize,
    },
    /// An object of string values.
    StrMap,
}

#[derive(Debug, Clone)]
pub struct Param {
    pub name: &'static str,
    pub kind: Kind,
    pub required: bool,
    pub description: String,
}

impl Param {
    pub fn new(name: &'static str, kind: Kind, description: impl Into<String>) -> Self {
        Param {
            name,
            kind,
            required: false,
            description: description.into(),
        }
    }

    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }

    fn schema(&self) -> Value {
        let mut schema = match &self.kind {
            Kind::Str { min, max } => json!({"type": "string", "minLength": min, "maxLength": max}),
            Kind::Text => json!({"type": "string"}),
            Kind::SessionId => json!({"type": "string", "pattern": "^[0-9a-f]{32}$"}),
            Kind::Int { min, max, default } => {
                json!({"type": "integer", "minimum": min, "maximum": max, "default": default})
            }
            Kind::OptInt { min, max } => json!({"type": "integer", "minimum": min, "maximum": max}),
            Kind::Bool => json!({"type": "boolean", "default": false}),
            Kind::OneOf(values) => json!({"type": "string", "enum": values, "default": values[0]}),
            Kind::StrList {
                min,
                max,
                max_chars,
            } => json!({
                "type": "array",
                "items": {"type": "string", "minLength": 1, "maxLength": max_chars},
                "minItems": min,
                "maxItems": max,
            }),
            Kind::StrMap => json!({
                "type": "object",
                "additionalProperties": {"type": "string"},
            }),
        };
        // A parameter whose name and schema say it all has no description.
        if !self.description.is_empty() {
            schema["description"] = self.description.clone().into();
        }
        schema
    }

    fn check(&self, value: &Value) -> Result<(), ToolError> {
        let fail = |rule: String| Err(ToolError::invalid_argument(self.name, rule));
        let got = describe(value);
        match &self.kind {
            Kind::Str { min, max } => match value.as_str() {
                Some(s) if (*min..=*max).contains(&s.chars().count()) => Ok(()),
                Some(s) => fail(format!(
                    "must be {min} to {max} characters long, got {}",
                    s.chars().count()
                )),
                None => fail(format!("must be a string, got {}", type_name(value))),
            },
            Kind::Text => match value {
                Value::String(_) => Ok(()),
                _ => fail(format!("must be a string, got {}", type_name(value))),
            },
            Kind::SessionId => match value.as_str() {
                Some(s)
                    if s.len() == 32
                        && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) =>
                {
                    Ok(())
                }
                _ => fail(format!(
                    "must be a session id (32 lowercase hex digits, as terminal_start returned), got {got}"
                )),
            },
            Kind::Int { min, max, .. } | Kind::OptInt { min, max } => {
                match uint_in(value, *min, *max) {
                    Some(_) => Ok(()),
                    None => fail(format!("must be an integer from {min} to {max}, got {got}")),
                }
            }
            Kind::Bool => match value {
                Value::Bool(_) => Ok(()),
                _ => fail(format!("must be true or false, got {got}")),
            },
            Kind::OneOf(values) => match value.as_str() {
                Some(s) if values.contains(&s) => Ok(()),
                _ => fail(format!("must be one of {}, got {got}", values.join(", "))),
            },
            Kind::StrList {
                min,
                max,
                max_chars,
            } => match value.as_array() {
                Some(items) if !(*min..=*max).contains(&items.len()) => fail(format!(
                    "must hold {min} to {max} items, got {}",
                    items.len()
                )),
                Some(items)
                    if items.iter().all(|i| {
                        i.as_str()
                            .is_some_and(|s| (1..=*max_chars).contains(&s.chars().count()))
                    }) =>
                {
                    Ok(())
                }
                Some(_) => fail(format!(
                    "must hold only strings of 1 to {max_chars} characters"
                )),
                None => fail(format!(
                    "must be an array of strings, got {}",
                    type_name(value)
                )),
            },
            Kind::StrMap => match value.as_object() {
                Some(map) => match map.iter().find(|(_, v)| !v.is_string()) {
                    None => Ok(()),
                    Some((k, v)) => fail(format!(
                        "must map names to strings; `{k}` is {}",
                        type_name(v)
                    )),
                },
                None => fail(format!(
                    "must be an object of strings, got {}",
                    type_name(value)
                )),
            },
        }
    }
}

/// The input schema of a tool taking `params`.
pub fn input_schema(params: &[Param]) -> Map<String, Value> {
    let properties: Map<String, Value> = params
        .iter()
        .map(|p| (p.name.to_owned(), p.schema()))
        .collect();
    let required: Vec<Value> = params
        .iter()
        .filter(|p| p.required)
        .map(|p| p.name.into())
        .collect();
    // Moved in, not through `json!`, which would copy the properties through serde.
    let mut schema = Map::new();
    schema.insert("type".into(), "object".into());
    schema.insert("properties".into(), Value::Object(properties));
    schema.insert("required".into(), Value::Array(required));
    schema.insert("additionalProperties".into(), false.into());
    schema
}

/// Arguments that passed their declarations; accessors fall back to declared defaults.
pub struct Args {
    values: Map<String, Value>,
    params: Vec<Param>,
}

impl Args {
    pub fn decode(
        params: &[Param],
        arguments: Option<Map<String, Value>>,
    ) -> Result<Args, ToolError> {
        let values = arguments.unwrap_or_default();
        if let Some(unknown) = values
            .keys()
            .find(|k| !params.iter().any(|p| p.name == k.as_str()))
        {
            let names: Vec<&str> = params.iter().map(|p| p.name).collect();
            return Err(ToolError::invalid_argument(
                unknown,
                format!(
                    "is not an argument of this tool; it takes: {}",
                    if names.is_empty() {
                        "none".to_owned()
                    } else {
                        names.join(", ")
                    }
                ),
            ));
        }
        for param in params {
            match values.get(param.name) {
                Some(value) => param.check(value)?,
                None if param.required => {
                    return Err(ToolError::invalid_argument(param.name, "is required"));
                }
                None => {}
            }
        }
        Ok(Args {
            values,
            params: params.to_vec(),
        })
    }

    pub fn str(&self, name: &str) -> Option<&str> {
        self.values.get(name).and_then(Value::as_str)
    }

    pub fn int(&self, name: &str) -> u64 {
        match self.values.get(name).and_then(Value::as_u64) {
            Some(n) => n,
            None => self
                .params
                .iter()
                .find_map(|p| match (p.name == name, &p.kind) {
                    (true, Kind::Int { default, .. }) => Some(*default),
                    _ => None,
                })
                .unwrap_or_default(),
        }
    }

    pub fn has(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }

    pub fn opt_int(&self, name: &str) -> Option<u64> {
        self.values.get(name).and_then(Value::as_u64)
    }

    pub fn bool(&self, name: &str) -> bool {
        self.values
            .get(name)
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// A `OneOf` argument, or its first (default) value.
    pub fn choice(&self, name: &str) -> &str {
        match self.values.get(name).and_then(Value::as_str) {
            Some(s) => s,
            None => self
                .params
                .iter()
                .find_map(|p| match (p.name == name, &p.kind) {
                    (true, Kind::OneOf(values)) => Some(values[0]),
                    _ => None,
                })
                .unwrap_or_default(),
        }
    }

    pub fn str_list(&self, name: &str) -> Vec<&str> {
        self.values
            .get(name)
            .and_then(Value::as_array)
            .map(|items| items.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }

    pub fn str_map(&self, name: &str) -> std::collections::BTreeMap<String, String> {
        self.values
            .get(name)
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Vec<Param> {
        vec![
            Param::new("session_id", Kind::SessionId, "id").required(),
            Param::new(
                "cursor",
                Kind::Int {
                    min: 0,
                    max: 100,
                    default: 0,
                },
                "c",
            ),
            Param::new("strip", Kind::Bool, "s"),
            Param::new("stream", Kind::OneOf(&["any", "stdout"]), "s"),
            Param::new(
                "keys",
                Kind::StrList {
                    min: 1,
                    max: 2,
                    max_chars: 3,
                },
                "k",
            ),
        ]
    }

    fn decode(v: Value) -> Result<Args, ToolError> {
        Args::decode(&params(), v.as_object().cloned())
    }

    const SID: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn bad_arguments_name_the_parameter() {
        let cases = [
            (json!({}), "session_id", "is required"),
            (
                json!({"session_id": SID, "extra": 1}),
                "extra",
                "is not an argument",
            ),
            (
                json!({"session_id": SID, "cursor": true}),
                "cursor",
                "from 0 to 100, got a boolean",
            ),
            (
                json!({"session_id": SID, "cursor": "5"}),
                "cursor",
                "got a string",
            ),
            (
                json!({"session_id": SID, "cursor": 2.5}),
                "cursor",
                "got a non-integer number",
            ),
            (
                json!({"session_id": SID, "cursor": -1}),
                "cursor",
                "from 0 to 100",
            ),
            (
                json!({"session_id": SID, "cursor": 101}),
                "cursor",
                "from 0 to 100",
            ),
            (
                json!({"session_id": SID, "cursor": null}),
                "cursor",
                "got null",
            ),
            (
                json!({"session_id": SID, "strip": 1}),
                "strip",
                "true or false",
            ),
            (
                json!({"session_id": "ABC"}),
                "session_id",
                "32 lowercase hex",
            ),
            (
                json!({"session_id": SID, "stream": "err"}),
                "stream",
                "one of any, stdout",
            ),
            (
                json!({"session_id": SID, "keys": []}),
                "keys",
                "1 to 2 items",
            ),
            (
                json!({"session_id": SID, "keys": ["a", 1]}),
                "keys",
                "only strings",
            ),
            (
                json!({"session_id": SID, "keys": ["abcd"]}),
                "keys",
                "1 to 3 characters",
            ),
        ];
        for (args, param, rule) in cases {
            let e = decode(args.clone())
                .err()
                .unwrap_or_else(|| panic!("{args} accepted"));
            assert_eq!(e.code, crate::errors::ErrorCode::InvalidArgument);
            assert_eq!(e.extra["parameter"], param, "{args}");
            assert!(e.message.contains(rule), "{args}: {}", e.message);
        }
    }

    #[test]
    fn defaults_apply_when_absent() {
        let a = decode(json!({"session_id": SID})).unwrap();
        assert_eq!(a.int("cursor"), 0);
        assert!(!a.bool("strip"));
        assert_eq!(a.choice("stream"), "any");
        let a = decode(json!({"session_id": SID, "cursor": 7, "strip": true})).unwrap();
        assert_eq!(a.int("cursor"), 7);
        assert!(a.bool("strip"));
    }

    #[test]
    fn schema_is_strict() {
        let s = input_schema(&params());
        assert_eq!(s["additionalProperties"], false);
        assert_eq!(s["required"], json!(["session_id"]));
        assert_eq!(s["properties"]["cursor"]["maximum"], 100);
    }
}

/// Arbitrary JSON thrown at every tool's argument decoder: never a panic, and either an
/// `INVALID_ARGUMENT` naming what to fix or arguments whose every accessor answers.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;
    use serde_json::{Map, Value};

    use super::{Args, Kind};
    use crate::errors::ErrorCode;

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            ".{0,40}".prop_map(Value::String),
            "[0-9a-f]{32}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(".{0,8}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn every_tool_decodes_any_json_without_panicking(
            tool in any::<prop::sample::Index>(),
            picks in prop::collection::vec((any::<prop::sample::Index>(), json()), 0..6),
            stray in prop::option::of((".{1,8}", json())),
        ) {
            let root = std::env::temp_dir();
            let mut config = crate::config::default_config(&root);
            config.commands.extend(crate::config::shell_profiles());
            let specs = crate::tools::catalog::catalog(&config);
            let spec = tool.get(&specs);
            let mut arguments = Map::new();
            for (param, value) in &picks {
                if !spec.params.is_empty() {
                    arguments.insert(param.get(&spec.params).name.to_owned(), value.clone());
                }
            }
            if let Some((key, value)) = stray {
                arguments.insert(key, value);
            }
            match Args::decode(&spec.params, Some(arguments)) {
                Err(e) => prop_assert_eq!(e.code, ErrorCode::InvalidArgument),
                Ok(args) => {
                    for param in &spec.params {
                        let name = param.name;
                        match &param.kind {
                            Kind::Str { .. } | Kind::Text | Kind::SessionId => drop(args.str(name)),
                            Kind::Int { .. } => drop(args.int(name)),
                            Kind::OptInt { .. } => drop(args.opt_int(name)),
                            Kind::Bool => drop(args.bool(name)),
                            Kind::OneOf(_) => drop(args.choice(name)),
                            Kind::StrList { .. } => drop(args.str_list(name)),
                            _ => drop(args.has(name)),
                        }
                    }
                }
            }
        }
    }
}
