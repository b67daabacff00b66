//! Protobuf JSON for the `/v1/` gateway, as Gazette's grpc-gateway writes and reads it
//! (gogo `jsonpb` through `gogo/gateway.JSONPb{EmitDefaults: true}`).
//!
//! Encoding covers exactly the messages `/v1/journals/list` and `/v1/journals/read` emit
//! (ListResponse and ReadResponse with everything nested in them), written by hand in Go's
//! field order: lowerCamelCase names, every field present (defaults included), 64-bit
//! integers as strings, bytes as standard base64, enums by name (an unknown value as its
//! number), `google.protobuf.Duration` as `"1.500s"`. Fields Gazette declares non-nullable
//! (gogoproto) are always objects; nullable messages and empty bytes are `null`.
//!
//! Decoding covers ListRequest and ReadRequest as jsonpb's Unmarshaler (unknown fields
//! disallowed): original or lowerCamelCase names (camel wins if both), integers as numbers or
//! strings, `null` for a default. Parsing goes through `serde_json::Value`; nothing panics.
//!
//! Lives on: any (pure functions).

use base64::Engine;
use protocol::{
    Fragment, Header, JournalSpec, LabelSelector, LabelSet, ListRequest, ListResponse, ReadRequest,
    ReadResponse, Route, header, journal_spec, list_response, process_spec,
};
use serde_json::{Map, Value};

// ------------------------------------------------------------------------------------------
// Encoding.
// ------------------------------------------------------------------------------------------

/// A JSON object being written: `{`, fields separated by commas, `}`.
struct Obj<'a> {
    out: &'a mut String,
    first: bool,
}

impl<'a> Obj<'a> {
    fn new(out: &'a mut String) -> Self {
        out.push('{');
        Obj { out, first: true }
    }

    /// Writes the key of the next field and returns the output for its value.
    fn key(&mut self, name: &str) -> &mut String {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        push_str(self.out, name);
        self.out.push(':');
        self.out
    }

    fn str(&mut self, name: &str, v: &str) {
        push_str(self.key(name), v);
    }

    /// int32, uint32 and bool: bare.
    fn num(&mut self, name: &str, v: impl std::fmt::Display) {
        let out = self.key(name);
        out.push_str(&v.to_string());
    }

    /// int64 and uint64: quoted, as jsonpb.
    fn quoted(&mut self, name: &str, v: impl std::fmt::Display) {
        let out = self.key(name);
        out.push('"');
        out.push_str(&v.to_string());
        out.push('"');
    }

    fn end(self) {
        self.out.push('}');
    }
}

/// A JSON string as Go's `encoding/json` writes it (HTML-safe: `<`, `>`, `&`, U+2028 and
/// U+2029 are escaped).
fn push_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// An enum by name, or its bare number if the value is not one of the enum's.
fn push_enum(out: &mut String, name: Option<&str>, value: i32) {
    match name {
        Some(name) => push_str(out, name),
        None => out.push_str(&value.to_string()),
    }
}

fn push_list<T>(out: &mut String, items: &[T], mut each: impl FnMut(&mut String, &T)) {
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        each(out, item);
    }
    out.push(']');
}

/// `google.protobuf.Duration` as jsonpb: seconds with 0, 3, 6 or 9 fractional digits.
fn push_duration(out: &mut String, seconds: i64, nanos: i32) {
    let mut nanos = i64::from(nanos);
    let mut text = if nanos < 0 && seconds == 0 {
        nanos = -nanos;
        format!("-{seconds}.{nanos:09}")
    } else {
        format!("{seconds}.{:09}", nanos.abs())
    };
    for suffix in ["000", "000", ".000"] {
        if let Some(t) = text.strip_suffix(suffix) {
            text.truncate(t.len());
        }
    }
    out.push('"');
    out.push_str(&text);
    out.push_str("s\"");
}

fn push_status(out: &mut String, status: i32) {
    push_enum(
        out,
        protocol::Status::try_from(status)
            .ok()
            .map(|s| s.as_str_name()),
        status,
    );
}

fn push_codec(out: &mut String, codec: i32) {
    push_enum(
        out,
        protocol::CompressionCodec::try_from(codec)
            .ok()
            .map(|c| c.as_str_name()),
        codec,
    );
}

fn push_process_id(out: &mut String, id: Option<&process_spec::Id>) {
    let id = id.cloned().unwrap_or_default();
    let mut o = Obj::new(out);
    o.str("zone", &id.zone);
    o.str("suffix", &id.suffix);
    o.end();
}

fn push_route(out: &mut String, route: Option<&Route>) {
    let route = route.cloned().unwrap_or_default();
    let mut o = Obj::new(out);
    push_list(o.key("members"), &route.members, |out, m| {
        push_process_id(out, Some(m))
    });
    o.num("primary", route.primary);
    push_list(o.key("endpoints"), &route.endpoints, |out, e| {
        push_str(out, e)
    });
    o.end();
}

/// A Header; gogo non-nullable everywhere except ReadResponse (`nullable` there).
fn push_header(out: &mut String, h: Option<&Header>, nullable: bool) {
    let default = Header::default();
    let h = match h {
        Some(h) => h,
        None if nullable => return out.push_str("null"),
        None => &default,
    };
    let mut o = Obj::new(out);
    push_process_id(o.key("processId"), h.process_id.as_ref());
    push_route(o.key("route"), h.route.as_ref());
    let etcd = h.etcd.unwrap_or_default();
    let mut e = Obj::new(o.key("etcd"));
    push_etcd(&mut e, &etcd);
    e.end();
    o.end();
}

fn push_etcd(e: &mut Obj<'_>, etcd: &header::Etcd) {
    e.quoted("clusterId", etcd.cluster_id);
    e.quoted("memberId", etcd.member_id);
    e.quoted("revision", etcd.revision);
    e.quoted("raftTerm", etcd.raft_term);
}

fn push_label_set(out: &mut String, set: Option<&LabelSet>) {
    let set = set.cloned().unwrap_or_default();
    let mut o = Obj::new(out);
    push_list(o.key("labels"), &set.labels, |out, l| {
        let mut lo = Obj::new(out);
        lo.str("name", &l.name);
        lo.str("value", &l.value);
        lo.num("prefix", l.prefix);
        lo.end();
    });
    o.end();
}

fn push_fragment_spec(out: &mut String, f: Option<&journal_spec::Fragment>) {
    let f = f.cloned().unwrap_or_default();
    let mut o = Obj::new(out);
    o.quoted("length", f.length);
    push_codec(o.key("compressionCodec"), f.compression_codec);
    push_list(o.key("stores"), &f.stores, |out, s| push_str(out, s));
    for (name, d) in [
        ("refreshInterval", &f.refresh_interval),
        ("retention", &f.retention),
        ("flushInterval", &f.flush_interval),
    ] {
        let (s, n) = d.as_ref().map_or((0, 0), |d| (d.seconds, d.nanos));
        push_duration(o.key(name), s, n);
    }
    o.str("pathPostfixTemplate", &f.path_postfix_template);
    o.end();
}

fn push_journal_spec(out: &mut String, spec: Option<&JournalSpec>) {
    let spec = spec.cloned().unwrap_or_default();
    let mut o = Obj::new(out);
    o.str("name", &spec.name);
    o.num("replication", spec.replication);
    push_label_set(o.key("labels"), spec.labels.as_ref());
    push_fragment_spec(o.key("fragment"), spec.fragment.as_ref());
    o.num("flags", spec.flags);
    o.quoted("maxAppendRate", spec.max_append_rate);
    match &spec.suspend {
        None => o.key("suspend").push_str("null"),
        Some(s) => {
            let mut so = Obj::new(o.key("suspend"));
            push_enum(
                so.key("level"),
                journal_spec::suspend::Level::try_from(s.level)
                    .ok()
                    .map(|l| l.as_str_name()),
                s.level,
            );
            so.quoted("offset", s.offset);
            so.end();
        }
    }
    o.end();
}

fn push_fragment(out: &mut String, f: &Fragment) {
    let mut o = Obj::new(out);
    o.str("journal", &f.journal);
    o.quoted("begin", f.begin);
    o.quoted("end", f.end);
    let sum = f.sum.unwrap_or_default();
    let mut so = Obj::new(o.key("sum"));
    so.quoted("part1", sum.part1);
    so.quoted("part2", sum.part2);
    so.num("part3", sum.part3);
    so.end();
    push_codec(o.key("compressionCodec"), f.compression_codec);
    o.str("backingStore", &f.backing_store);
    o.quoted("modTime", f.mod_time);
    o.str("pathPostfix", &f.path_postfix);
    o.end();
}

/// A ListResponse as gogo jsonpb (EmitDefaults) writes it.
pub fn list_response(out: &mut String, r: &ListResponse) {
    let mut o = Obj::new(out);
    push_status(o.key("status"), r.status);
    push_header(o.key("header"), r.header.as_ref(), false);
    push_list(
        o.key("journals"),
        &r.journals,
        |out, j: &list_response::Journal| {
            let mut jo = Obj::new(out);
            push_journal_spec(jo.key("spec"), j.spec.as_ref());
            jo.quoted("modRevision", j.mod_revision);
            push_route(jo.key("route"), j.route.as_ref());
            jo.quoted("createRevision", j.create_revision);
            jo.end();
        },
    );
    o.end();
}

/// A ReadResponse as gogo jsonpb (EmitDefaults) writes it.
pub fn read_response(out: &mut String, r: &ReadResponse) {
    let mut o = Obj::new(out);
    push_status(o.key("status"), r.status);
    push_header(o.key("header"), r.header.as_ref(), true);
    o.quoted("offset", r.offset);
    o.quoted("writeHead", r.write_head);
    match &r.fragment {
        Some(f) => push_fragment(o.key("fragment"), f),
        None => o.key("fragment").push_str("null"),
    }
    o.str("fragmentUrl", &r.fragment_url);
    let content = o.key("content");
    if r.content.is_empty() {
        // A proto3 bytes field that was never on the wire is a nil slice in Go.
        content.push_str("null");
    } else {
        content.push('"');
        content.push_str(&base64::engine::general_purpose::STANDARD.encode(&r.content));
        content.push('"');
    }
    o.end();
}

/// grpc-gateway's `{"result": <message>}` stream chunk.
pub fn result_chunk(message: impl FnOnce(&mut String)) -> String {
    let mut out = String::from("{\"result\":");
    message(&mut out);
    out.push('}');
    out
}

/// grpc-gateway's `StreamError` chunk (`{"error": {...}}`) for a failed RPC, with the HTTP
/// status grpc-gateway maps the code to.
pub fn error_chunk(code: protocol::grpc::Code, message: &str) -> (u16, String) {
    let http = http_status_of(code);
    let mut out = String::from("{\"error\":");
    let mut o = Obj::new(&mut out);
    o.num("grpcCode", code as u32);
    o.num("httpCode", http);
    o.str("message", message);
    o.str("httpStatus", status_text(http));
    o.key("details").push_str("[]");
    o.end();
    out.push('}');
    (http, out)
}

/// grpc-gateway's body for an error before the stream starts (`google.rpc.Status`).
pub fn status_body(code: protocol::grpc::Code, message: &str) -> (u16, String) {
    let mut out = String::new();
    let mut o = Obj::new(&mut out);
    o.num("code", code as u32);
    o.str("message", message);
    o.key("details").push_str("[]");
    o.end();
    (http_status_of(code), out)
}

/// grpc-gateway's `HTTPStatusFromCode`.
pub fn http_status_of(code: protocol::grpc::Code) -> u16 {
    use protocol::grpc::Code::*;
    match code {
        Ok => 200,
        Cancelled => 408,
        Unknown => 500,
        InvalidArgument => 400,
        DeadlineExceeded => 504,
        NotFound => 404,
        AlreadyExists => 409,
        PermissionDenied => 403,
        Unauthenticated => 401,
        ResourceExhausted => 429,
        FailedPrecondition => 400,
        Aborted => 409,
        OutOfRange => 400,
        Unimplemented => 501,
        Internal => 500,
        Unavailable => 503,
        DataLoss => 500,
    }
}

/// Go's `http.StatusText` for the statuses above.
pub fn status_text(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    }
}

// ------------------------------------------------------------------------------------------
// Decoding.
// ------------------------------------------------------------------------------------------

/// The fields of one JSON object, consumed as jsonpb does: each known field is taken out by
/// its original or camel name; whatever is left is an unknown field.
struct Fields {
    map: Map<String, Value>,
    ty: &'static str,
}

impl Fields {
    fn new(v: Value, ty: &'static str) -> Result<Fields, String> {
        match v {
            Value::Object(map) => Ok(Fields { map, ty }),
            other => Err(format!(
                "json: cannot unmarshal {} into Go value of type map[string]json.RawMessage",
                kind(&other)
            )),
        }
    }

    /// The field's value, `None` if absent or `null`. Camel case wins over the original.
    fn take(&mut self, orig: &str, camel: &str) -> Option<Value> {
        let a = self.map.remove(orig);
        let b = if camel != orig {
            self.map.remove(camel)
        } else {
            None
        };
        match b.or(a) {
            Some(Value::Null) | None => None,
            Some(v) => Some(v),
        }
    }

    fn finish(self) -> Result<(), String> {
        match self.map.keys().next() {
            Some(name) => Err(format!("unknown field {name:?} in {}", self.ty)),
            None => Ok(()),
        }
    }
}

/// Go's name of a JSON value's kind, for `cannot unmarshal <kind>` errors.
fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "bool".into(),
        Value::Number(n) => format!("number {n}"),
        Value::String(_) => "string".into(),
        Value::Array(_) => "array".into(),
        Value::Object(_) => "object".into(),
    }
}

fn mismatch(v: &Value, go_type: &str) -> String {
    format!(
        "json: cannot unmarshal {} into Go value of type {go_type}",
        kind(v)
    )
}

/// An integer field: a JSON number, or a string holding one (jsonpb strips the quotes).
fn int<T: TryFrom<i128>>(v: Value, go_type: &str) -> Result<T, String> {
    let parsed: Option<i128> = match &v {
        Value::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from)),
        Value::String(s) => {
            let t = s.trim_matches(|c: char| matches!(c, ' ' | '\t' | '\n' | '\r'));
            // JSON number syntax for an integer: optional minus, no leading zeros, digits.
            let digits = t.strip_prefix('-').unwrap_or(t);
            let valid = !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && (digits == "0" || !digits.starts_with('0'));
            if valid { t.parse::<i128>().ok() } else { None }
        }
        _ => None,
    };
    match parsed {
        Some(n) => T::try_from(n).map_err(|_| mismatch(&v, go_type)),
        None if matches!(v, Value::String(_)) => Err(format!(
            "json: cannot unmarshal string into Go value of type {go_type}"
        )),
        None => Err(mismatch(&v, go_type)),
    }
}

fn boolean(v: Value) -> Result<bool, String> {
    match v {
        Value::Bool(b) => Ok(b),
        other => Err(mismatch(&other, "bool")),
    }
}

fn string(v: Value) -> Result<String, String> {
    match v {
        Value::String(s) => Ok(s),
        other => Err(mismatch(&other, "string")),
    }
}

fn array(v: Value, go_type: &str) -> Result<Vec<Value>, String> {
    match v {
        Value::Array(items) => Ok(items),
        other => Err(mismatch(&other, go_type)),
    }
}

fn label_set(v: Value) -> Result<LabelSet, String> {
    let mut f = Fields::new(v, "protocol.LabelSet")?;
    let mut set = LabelSet::default();
    if let Some(items) = f.take("labels", "labels") {
        for item in array(items, "[]protocol.Label")? {
            let mut lf = Fields::new(item, "protocol.Label")?;
            let mut label = protocol::Label::default();
            if let Some(v) = lf.take("name", "name") {
                label.name = string(v)?;
            }
            if let Some(v) = lf.take("value", "value") {
                label.value = string(v)?;
            }
            if let Some(v) = lf.take("prefix", "prefix") {
                label.prefix = boolean(v)?;
            }
            lf.finish()?;
            set.labels.push(label);
        }
    }
    f.finish()?;
    Ok(set)
}

fn label_selector(v: Value) -> Result<LabelSelector, String> {
    let mut f = Fields::new(v, "protocol.LabelSelector")?;
    let mut sel = LabelSelector::default();
    if let Some(v) = f.take("include", "include") {
        sel.include = Some(label_set(v)?);
    }
    if let Some(v) = f.take("exclude", "exclude") {
        sel.exclude = Some(label_set(v)?);
    }
    f.finish()?;
    Ok(sel)
}

fn process_id(v: Value) -> Result<process_spec::Id, String> {
    let mut f = Fields::new(v, "protocol.ProcessSpec_ID")?;
    let mut id = process_spec::Id::default();
    if let Some(v) = f.take("zone", "zone") {
        id.zone = string(v)?;
    }
    if let Some(v) = f.take("suffix", "suffix") {
        id.suffix = string(v)?;
    }
    f.finish()?;
    Ok(id)
}

fn route(v: Value) -> Result<Route, String> {
    let mut f = Fields::new(v, "protocol.Route")?;
    let mut r = Route::default();
    if let Some(v) = f.take("members", "members") {
        for m in array(v, "[]protocol.ProcessSpec_ID")? {
            r.members.push(process_id(m)?);
        }
    }
    if let Some(v) = f.take("primary", "primary") {
        r.primary = int(v, "int32")?;
    }
    if let Some(v) = f.take("endpoints", "endpoints") {
        for e in array(v, "[]protocol.Endpoint")? {
            r.endpoints.push(string(e)?);
        }
    }
    f.finish()?;
    Ok(r)
}

fn header(v: Value) -> Result<Header, String> {
    let mut f = Fields::new(v, "protocol.Header")?;
    let mut h = Header::default();
    if let Some(v) = f.take("process_id", "processId") {
        h.process_id = Some(process_id(v)?);
    }
    if let Some(v) = f.take("route", "route") {
        h.route = Some(route(v)?);
    }
    if let Some(v) = f.take("etcd", "etcd") {
        let mut ef = Fields::new(v, "protocol.Header_Etcd")?;
        let mut etcd = header::Etcd::default();
        if let Some(v) = ef.take("cluster_id", "clusterId") {
            etcd.cluster_id = int(v, "uint64")?;
        }
        if let Some(v) = ef.take("member_id", "memberId") {
            etcd.member_id = int(v, "uint64")?;
        }
        if let Some(v) = ef.take("revision", "revision") {
            etcd.revision = int(v, "int64")?;
        }
        if let Some(v) = ef.take("raft_term", "raftTerm") {
            etcd.raft_term = int(v, "uint64")?;
        }
        ef.finish()?;
        h.etcd = Some(etcd);
    }
    f.finish()?;
    Ok(h)
}

/// The first JSON value of `body` (as Go's `json.Decoder`: later bytes are not read);
/// `None` for a body with no value at all (jsonpb's `io.EOF`, an empty request).
fn first_value(body: &[u8]) -> Result<Option<Value>, String> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(None);
    }
    let mut values = serde_json::Deserializer::from_slice(body).into_iter::<Value>();
    match values.next() {
        None => Ok(None),
        Some(Ok(v)) => Ok(Some(v)),
        Some(Err(e)) => Err(format!("invalid JSON: {e}")),
    }
}

/// Decodes a ListRequest from a `/v1/journals/list` body.
pub fn list_request(body: &[u8]) -> Result<ListRequest, String> {
    let mut req = ListRequest::default();
    let Some(v) = first_value(body)? else {
        return Ok(req);
    };
    let mut f = Fields::new(v, "protocol.ListRequest")?;
    if let Some(v) = f.take("selector", "selector") {
        req.selector = Some(label_selector(v)?);
    }
    if let Some(v) = f.take("watch", "watch") {
        req.watch = boolean(v)?;
    }
    if let Some(v) = f.take("watch_resume", "watchResume") {
        req.watch_resume = Some(header(v)?);
    }
    f.finish()?;
    Ok(req)
}

/// Decodes a ReadRequest from a `/v1/journals/read` body.
pub fn read_request(body: &[u8]) -> Result<ReadRequest, String> {
    let mut req = ReadRequest::default();
    let Some(v) = first_value(body)? else {
        return Ok(req);
    };
    let mut f = Fields::new(v, "protocol.ReadRequest")?;
    if let Some(v) = f.take("header", "header") {
        req.header = Some(header(v)?);
    }
    if let Some(v) = f.take("journal", "journal") {
        req.journal = string(v)?;
    }
    if let Some(v) = f.take("offset", "offset") {
        req.offset = int(v, "protocol.Offset")?;
    }
    if let Some(v) = f.take("block", "block") {
        req.block = boolean(v)?;
    }
    if let Some(v) = f.take("do_not_proxy", "doNotProxy") {
        req.do_not_proxy = boolean(v)?;
    }
    if let Some(v) = f.take("metadata_only", "metadataOnly") {
        req.metadata_only = boolean(v)?;
    }
    if let Some(v) = f.take("end_offset", "endOffset") {
        req.end_offset = int(v, "protocol.Offset")?;
    }
    if let Some(v) = f.take("begin_mod_time", "beginModTime") {
        req.begin_mod_time = int(v, "int64")?;
    }
    if let Some(v) = f.take("min_etcd_revision", "minEtcdRevision") {
        req.min_etcd_revision = int(v, "int64")?;
    }
    f.finish()?;
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn read_response_matches_jsonpb() {
        let mut out = String::new();
        read_response(
            &mut out,
            &ReadResponse {
                status: 0,
                offset: 5,
                write_head: 1 << 40,
                content: Bytes::from_static(b"hi<"),
                ..Default::default()
            },
        );
        assert_eq!(
            out,
            r#"{"status":"OK","header":null,"offset":"5","writeHead":"1099511627776","fragment":null,"fragmentUrl":"","content":"aGk8"}"#
        );
        let mut out = String::new();
        read_response(
            &mut out,
            &ReadResponse {
                status: 99,
                header: Some(Header::default()),
                fragment: Some(Fragment {
                    journal: "a/<b>".into(),
                    end: 3,
                    compression_codec: 4,
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        assert_eq!(
            out,
            concat!(
                r#"{"status":99,"header":{"processId":{"zone":"","suffix":""},"route":{"members":[],"primary":0,"endpoints":[]},"#,
                r#""etcd":{"clusterId":"0","memberId":"0","revision":"0","raftTerm":"0"}},"offset":"0","writeHead":"0","#,
                r#""fragment":{"journal":"a/\u003cb\u003e","begin":"0","end":"3","sum":{"part1":"0","part2":"0","part3":0},"#,
                r#""compressionCodec":"SNAPPY","backingStore":"","modTime":"0","pathPostfix":""},"fragmentUrl":"","content":null}"#
            )
        );
    }

    #[test]
    fn list_response_matches_jsonpb() {
        let spec = JournalSpec {
            name: "a/j".into(),
            replication: 1,
            labels: Some(LabelSet {
                labels: vec![protocol::Label {
                    name: "app".into(),
                    value: "x".into(),
                    prefix: false,
                }],
            }),
            fragment: Some(journal_spec::Fragment {
                length: 1024,
                compression_codec: 1,
                stores: vec!["file:///".into()],
                refresh_interval: Some(prost_types::Duration {
                    seconds: 300,
                    nanos: 0,
                }),
                retention: None,
                flush_interval: Some(prost_types::Duration {
                    seconds: 1,
                    nanos: 500_000_000,
                }),
                path_postfix_template: String::new(),
            }),
            ..Default::default()
        };
        let mut out = String::new();
        list_response(
            &mut out,
            &ListResponse {
                status: 0,
                header: None,
                journals: vec![list_response::Journal {
                    spec: Some(spec),
                    mod_revision: 7,
                    route: None,
                    create_revision: 2,
                }],
            },
        );
        assert_eq!(
            out,
            concat!(
                r#"{"status":"OK","header":{"processId":{"zone":"","suffix":""},"route":{"members":[],"primary":0,"endpoints":[]},"#,
                r#""etcd":{"clusterId":"0","memberId":"0","revision":"0","raftTerm":"0"}},"journals":[{"spec":{"name":"a/j","#,
                r#""replication":1,"labels":{"labels":[{"name":"app","value":"x","prefix":false}]},"fragment":{"length":"1024","#,
                r#""compressionCodec":"NONE","stores":["file:///"],"refreshInterval":"300s","retention":"0s","flushInterval":"1.500s","#,
                r#""pathPostfixTemplate":""},"flags":0,"maxAppendRate":"0","suspend":null},"modRevision":"7","#,
                r#""route":{"members":[],"primary":0,"endpoints":[]},"createRevision":"2"}]}"#
            )
        );
    }

    #[test]
    fn durations_as_jsonpb() {
        let d = |s, n| {
            let mut out = String::new();
            push_duration(&mut out, s, n);
            out
        };
        assert_eq!(d(0, 0), "\"0s\"");
        assert_eq!(d(1, 1_000), "\"1.000001s\"");
        assert_eq!(d(0, -500_000_000), "\"-0.500s\"");
        assert_eq!(d(-2, -1), "\"-2.000000001s\"");
    }

    #[test]
    fn requests_decode_like_jsonpb() {
        let r = read_request(
            br#"{"journal":"a/j","offset":"12","endOffset":40,"do_not_proxy":true,"block":null} trailing"#,
        )
        .unwrap();
        assert_eq!(r.journal, "a/j");
        assert_eq!((r.offset, r.end_offset), (12, 40));
        assert!(r.do_not_proxy && !r.block);
        assert_eq!(read_request(b"  ").unwrap(), ReadRequest::default());
        assert_eq!(
            read_request(br#"{"journal":"a","bogus":1}"#).unwrap_err(),
            "unknown field \"bogus\" in protocol.ReadRequest"
        );
        assert_eq!(
            read_request(br#"{"offset":"x"}"#).unwrap_err(),
            "json: cannot unmarshal string into Go value of type protocol.Offset"
        );
        assert_eq!(
            read_request(br#"{"offset":1.5}"#).unwrap_err(),
            "json: cannot unmarshal number 1.5 into Go value of type protocol.Offset"
        );
        assert!(
            read_request(b"{nope")
                .unwrap_err()
                .starts_with("invalid JSON: ")
        );
        assert!(read_request(b"[]").is_err());

        let l = list_request(
            br#"{"selector":{"include":{"labels":[{"name":"app","value":"x"}]},"exclude":null},"watch_resume":{"etcd":{"revision":"3"}}}"#,
        )
        .unwrap();
        let sel = l.selector.unwrap();
        assert_eq!(sel.include.unwrap().labels[0].value, "x");
        assert!(sel.exclude.is_none());
        assert_eq!(l.watch_resume.unwrap().etcd.unwrap().revision, 3);
        assert!(list_request(br#"{"selector":{"include":{"labels":[{"nom":"a"}]}}}"#).is_err());
    }

    #[test]
    fn decoding_never_panics() {
        // Random mutations of valid bodies: every outcome is Ok or Err.
        let seeds: [&[u8]; 2] = [
            br#"{"journal":"a/j","offset":"12","header":{"etcd":{"clusterId":"1"},"route":{"members":[{"zone":"z"}]}}}"#,
            br#"{"selector":{"include":{"labels":[{"name":"app","value":"x","prefix":true}]}},"watch":true}"#,
        ];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let seed = seeds[(next() % 2) as usize];
            let mut body = seed.to_vec();
            for _ in 0..(next() % 4 + 1) {
                let at = (next() as usize) % body.len();
                body[at] = b"{}[]\":,0-9aezn\\ "[(next() % 16) as usize];
            }
            let _ = read_request(&body);
            let _ = list_request(&body);
        }
    }
}
