//! JSON text of any serde value, byte for byte what `serde_json` writes compactly, with
//! strings escaped by SIMD (`json_escape_simd`, sonic-rs's kernel).
//!
//! A page of output is one string of up to 64 KiB, carried twice in a tool result (as the
//! structured content, and inside the JSON text of the text content); `serde_json` looks
//! at every byte of a string through a table, one at a time, which made escaping the
//! largest cost of a page. Here plain text is looked at sixteen bytes at a time or more,
//! and only the bytes that need an escape (`"`, `\` and control characters) stop the copy.
//! Everything that is not a string is written as serde_json writes it (floats through
//! serde_json itself).

use std::fmt::Display;

use serde::ser::{self, Serialize};
use serde_json::Value;

/// Append the compact JSON text of `value` to `out`, as `serde_json::to_writer` writes it.
/// The text is built as a `String` from the first byte (the strings' own text and ASCII),
/// so nothing validates it as UTF-8 afterwards: for a page of CJK text that validation
/// cost more than the escaping.
pub fn write<T: Serialize + ?Sized>(value: &T, out: &mut String) -> Result<(), Error> {
    value.serialize(&mut Writer { out })
}

/// The compact JSON text of `value`, as `serde_json::to_string` writes it, in a string
/// made with room for `capacity` bytes.
pub fn to_string<T: Serialize + ?Sized>(value: &T, capacity: usize) -> Result<String, Error> {
    let mut out = String::with_capacity(capacity);
    write(value, &mut out)?;
    Ok(out)
}

/// About the length of `value`'s JSON text, from its strings' lengths and a few bytes for
/// everything else, without looking at the text: room for a page's text made at once.
pub fn size_hint(value: &Value) -> usize {
    match value {
        Value::String(s) => s.len() + 2,
        Value::Array(items) => items.iter().map(size_hint).sum::<usize>() + items.len() + 2,
        Value::Object(fields) => {
            fields
                .iter()
                .map(|(key, value)| key.len() + 4 + size_hint(value))
                .sum::<usize>()
                + 2
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => 20,
    }
}

#[derive(Debug)]
pub struct Error(String);

impl Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl ser::Error for Error {
    fn custom<T: Display>(msg: T) -> Self {
        Error(msg.to_string())
    }
}

struct Writer<'a> {
    out: &'a mut String,
}

impl Writer<'_> {
    fn raw(&mut self, text: &str) -> Result<(), Error> {
        self.out.push_str(text);
        Ok(())
    }

    /// An integer: its decimal digits, as serde_json writes it, straight into the text.
    fn integer(&mut self, n: impl Display) -> Result<(), Error> {
        use std::fmt::Write as _;
        write!(self.out, "{n}").map_err(|e| Error(e.to_string()))
    }

    /// A float, formatted by serde_json itself (its shortest form is not `Display`'s).
    fn float<T: Serialize>(&mut self, n: T) -> Result<(), Error> {
        let text = serde_json::to_string(&n).map_err(|e| Error(e.to_string()))?;
        self.raw(&text)
    }
}

/// `s` as a JSON string, escaped exactly as serde_json escapes it, appended to `out`.
fn write_str(out: &mut String, s: &str) {
    let mut bytes = std::mem::take(out).into_bytes();
    json_escape_simd::escape_into(s, &mut bytes);
    // SAFETY: `bytes` held `out`'s text, and `escape_into` appends `s` as a JSON string:
    // its text with ASCII escapes in place of the ASCII bytes they escape, UTF-8 still.
    // Should it panic, `out` is left empty, never holding part of a character.
    *out = unsafe { String::from_utf8_unchecked(bytes) };
}

/// An array or object being written; `close` ends it (a variant's wrapping object too).
struct Compound<'w, 'a> {
    writer: &'w mut Writer<'a>,
    first: bool,
    close: &'static str,
}

impl Compound<'_, '_> {
    fn comma(&mut self) {
        if !std::mem::replace(&mut self.first, false) {
            self.writer.out.push(',');
        }
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.comma();
        value.serialize(&mut *self.writer)
    }

    fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), Error> {
        self.comma();
        write_str(self.writer.out, key);
        self.writer.out.push(':');
        value.serialize(&mut *self.writer)
    }

    fn end(self) -> Result<(), Error> {
        self.writer.raw(self.close)
    }
}

impl<'w, 'a> Writer<'a> {
    fn open(&'w mut self, open: &str, close: &'static str) -> Compound<'w, 'a> {
        self.out.push_str(open);
        Compound {
            writer: self,
            first: true,
            close,
        }
    }

    /// `{"variant":` before a variant's content.
    fn variant(&mut self, variant: &str) {
        self.out.push('{');
        write_str(self.out, variant);
        self.out.push(':');
    }
}

impl<'w, 'a> ser::Serializer for &'w mut Writer<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Compound<'w, 'a>;
    type SerializeTuple = Compound<'w, 'a>;
    type SerializeTupleStruct = Compound<'w, 'a>;
    type SerializeTupleVariant = Compound<'w, 'a>;
    type SerializeMap = Compound<'w, 'a>;
    type SerializeStruct = Compound<'w, 'a>;
    type SerializeStructVariant = Compound<'w, 'a>;

    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.raw(if v { "true" } else { "false" })
    }
    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        self.integer(v)
    }
    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        self.integer(v)
    }
    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        self.integer(v)
    }
    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        self.integer(v)
    }
    fn serialize_i128(self, v: i128) -> Result<(), Error> {
        self.integer(v)
    }
    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        self.integer(v)
    }
    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        self.integer(v)
    }
    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        self.integer(v)
    }
    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        self.integer(v)
    }
    fn serialize_u128(self, v: u128) -> Result<(), Error> {
        self.integer(v)
    }
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        self.float(v)
    }
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        self.float(v)
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        write_str(self.out, v.encode_utf8(&mut [0; 4]));
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), Error> {
        write_str(self.out, v);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Error> {
        use ser::SerializeSeq;
        let mut seq = self.serialize_seq(Some(v.len()))?;
        for byte in v {
            seq.serialize_element(byte)?;
        }
        seq.end()
    }
    fn serialize_none(self) -> Result<(), Error> {
        self.raw("null")
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        self.raw("null")
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Error> {
        self.raw("null")
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Error> {
        write_str(self.out, variant);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.variant(variant);
        value.serialize(&mut *self)?;
        self.raw("}")
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Compound<'w, 'a>, Error> {
        Ok(self.open("[", "]"))
    }
    fn serialize_tuple(self, len: usize) -> Result<Compound<'w, 'a>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Compound<'w, 'a>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'w, 'a>, Error> {
        self.variant(variant);
        Ok(self.open("[", "]}"))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Compound<'w, 'a>, Error> {
        Ok(self.open("{", "}"))
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Compound<'w, 'a>, Error> {
        Ok(self.open("{", "}"))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'w, 'a>, Error> {
        self.variant(variant);
        Ok(self.open("{", "}}"))
    }
}

impl ser::SerializeSeq for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        Compound::end(self)
    }
}

impl ser::SerializeTuple for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        Compound::end(self)
    }
}

impl ser::SerializeTupleStruct for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        Compound::end(self)
    }
}

impl ser::SerializeTupleVariant for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        Compound::end(self)
    }
}

impl ser::SerializeMap for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        self.comma();
        key.serialize(KeyWriter {
            out: &mut *self.writer.out,
        })?;
        self.writer.out.push(':');
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        value.serialize(&mut *self.writer)
    }
    fn end(self) -> Result<(), Error> {
        Compound::end(self)
    }
}

impl ser::SerializeStruct for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.field(key, value)
    }
    fn end(self) -> Result<(), Error> {
        Compound::end(self)
    }
}

impl ser::SerializeStructVariant for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.field(key, value)
    }
    fn end(self) -> Result<(), Error> {
        Compound::end(self)
    }
}

/// Writes a map key as serde_json does: a string as it is, an integer or a bool quoted.
struct KeyWriter<'a> {
    out: &'a mut String,
}

impl KeyWriter<'_> {
    fn quoted(self, text: impl Display) -> Result<(), Error> {
        write_str(self.out, &text.to_string());
        Ok(())
    }
}

fn key_must_be_a_string() -> Error {
    Error("key must be a string".into())
}

/// Methods for the kinds of value a key cannot be.
macro_rules! not_a_key {
    ($($method:ident($($arg:ty),*) -> $ok:ty;)*) => {
        $(fn $method(self, $(_: $arg),*) -> Result<$ok, Error> {
            Err(key_must_be_a_string())
        })*
    };
}

impl<'a> ser::Serializer for KeyWriter<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = ser::Impossible<(), Error>;
    type SerializeTuple = ser::Impossible<(), Error>;
    type SerializeTupleStruct = ser::Impossible<(), Error>;
    type SerializeTupleVariant = ser::Impossible<(), Error>;
    type SerializeMap = ser::Impossible<(), Error>;
    type SerializeStruct = ser::Impossible<(), Error>;
    type SerializeStructVariant = ser::Impossible<(), Error>;

    fn serialize_str(self, v: &str) -> Result<(), Error> {
        write_str(self.out, v);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        self.quoted(v)
    }
    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.quoted(v)
    }
    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        self.quoted(v)
    }
    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        self.quoted(v)
    }
    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        self.quoted(v)
    }
    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        self.quoted(v)
    }
    fn serialize_i128(self, v: i128) -> Result<(), Error> {
        self.quoted(v)
    }
    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        self.quoted(v)
    }
    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        self.quoted(v)
    }
    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        self.quoted(v)
    }
    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        self.quoted(v)
    }
    fn serialize_u128(self, v: u128) -> Result<(), Error> {
        self.quoted(v)
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Error> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _value: &T) -> Result<(), Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<(), Error> {
        Err(key_must_be_a_string())
    }
    not_a_key! {
        serialize_f32(f32) -> ();
        serialize_f64(f64) -> ();
        serialize_bytes(&[u8]) -> ();
        serialize_none() -> ();
        serialize_unit() -> ();
        serialize_unit_struct(&'static str) -> ();
        serialize_seq(Option<usize>) -> Self::SerializeSeq;
        serialize_tuple(usize) -> Self::SerializeTuple;
        serialize_tuple_struct(&'static str, usize) -> Self::SerializeTupleStruct;
        serialize_tuple_variant(&'static str, u32, &'static str, usize) -> Self::SerializeTupleVariant;
        serialize_map(Option<usize>) -> Self::SerializeMap;
        serialize_struct(&'static str, usize) -> Self::SerializeStruct;
        serialize_struct_variant(&'static str, u32, &'static str, usize) -> Self::SerializeStructVariant;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    /// The characters at the escaper's edges: those JSON escapes (the quote, the backslash,
    /// controls with a short form and without), DEL (which it does not), and multi-byte ones,
    /// which a scan a block at a time must step over whole.
    const EDGES: [char; 13] = [
        '"', '\\', '\n', '\u{0}', '\u{1}', '\u{1f}', '\u{7f}', '\u{8}', '\u{c}', '/', 'é', '中',
        '😀',
    ];

    fn text_strategy() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                1 => Just('a'),
                EDGES.len() as u32 => proptest::sample::select(&EDGES[..]),
                1 => any::<char>(),
            ],
            0..80,
        )
        .prop_map(|cs| cs.into_iter().collect())
    }

    fn value_strategy() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            text_strategy().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                proptest::collection::btree_map(text_strategy(), inner, 0..8)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn same_as_serde_json<T: Serialize>(value: &T) {
        assert_eq!(
            to_string(value, 0).unwrap(),
            serde_json::to_string(value).unwrap()
        );
    }

    proptest! {
        /// Byte for byte what serde_json writes, for any value.
        #[test]
        fn writes_what_serde_json_writes(value in value_strategy()) {
            prop_assert_eq!(to_string(&value, 0).unwrap(), serde_json::to_string(&value).unwrap());
        }
    }

    #[test]
    fn escapes_at_every_position_of_a_block() {
        // Past 128 bytes: the widest kernel's four-register steps.
        for len in 1..140 {
            for at in 0..len {
                for special in EDGES {
                    let mut s: String = "x".repeat(len);
                    s.replace_range(at..at + 1, &special.to_string());
                    same_as_serde_json(&s);
                }
            }
        }
    }

    /// Derived types, enums of every shape, maps with integer keys: as serde_json.
    #[test]
    fn writes_derived_types_as_serde_json() {
        #[derive(serde::Serialize)]
        enum Shape {
            Unit,
            Newtype(u8),
            Tuple(u8, String),
            Struct { a: Option<u8>, b: f64 },
        }
        #[derive(serde::Serialize)]
        struct All {
            shapes: Vec<Shape>,
            #[serde(rename = "camelCase")]
            renamed: (i32, char, bool),
            keys: std::collections::BTreeMap<u32, ()>,
            bytes: &'static [u8],
            #[serde(skip_serializing_if = "Option::is_none")]
            skipped: Option<u8>,
            nan: f32,
        }
        same_as_serde_json(&All {
            shapes: vec![
                Shape::Unit,
                Shape::Newtype(7),
                Shape::Tuple(1, "t\"".into()),
                Shape::Struct {
                    a: None,
                    b: 1.5e300,
                },
            ],
            renamed: (-3, '\u{2}', true),
            keys: [(1, ()), (20, ())].into(),
            bytes: b"\x00\xff",
            skipped: None,
            nan: f32::NAN,
        });
    }
}
