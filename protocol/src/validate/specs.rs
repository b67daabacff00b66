//! Specs: journals, brokers, Routes, Headers and Fragments.

#[allow(unused_imports)]
use super::*;

pub(crate) fn check_codec(v: i32) -> VResult {
    match CompressionCodec::try_from(v) {
        Ok(c) if c != CompressionCodec::Invalid => Ok(()),
        _ => fail(format!("invalid value ({})", codec_name(v))),
    }
}

/// Validates a CompressionCodec value: a known codec other than INVALID.
pub fn validate_compression_codec(v: i32) -> Result<(), ValidationError> {
    check_codec(v).map_err(Into::into)
}

pub(crate) fn check_status(v: i32) -> VResult {
    match Status::try_from(v) {
        Ok(_) => Ok(()),
        Err(_) => fail(format!("invalid status ({})", status_name(v))),
    }
}

impl Check for journal_spec::Fragment {
    fn check(&self) -> VResult {
        if self.length < MIN_FRAGMENT_LEN || self.length > MAX_FRAGMENT_LEN {
            return fail(format!(
                "invalid Length ({}; expected {MIN_FRAGMENT_LEN} <= length <= {MAX_FRAGMENT_LEN})",
                self.length
            ));
        }
        check_codec(self.compression_codec).map_err(|e| e.ctx("CompressionCodec"))?;
        for (i, store) in self.stores.iter().enumerate() {
            let url = parse_store(store).map_err(|e| e.ctx(format!("Stores[{i}]")))?;
            if i == 0
                && url.scheme == "file"
                && self.compression_codec == CompressionCodec::GzipOffloadDecompression as i32
            {
                return fail(format!(
                    "GZIP_OFFLOAD_DECOMPRESSION is incompatible with file:// stores ({store})"
                ));
            }
        }
        let refresh = opt_duration(&self.refresh_interval, "RefreshInterval")?;
        if !(MIN_REFRESH_INTERVAL_NANOS..=MAX_REFRESH_INTERVAL_NANOS).contains(&refresh) {
            return fail(format!(
                "invalid RefreshInterval ({}; expected {} <= interval <= {})",
                format_go_duration(refresh),
                format_go_duration(MIN_REFRESH_INTERVAL_NANOS),
                format_go_duration(MAX_REFRESH_INTERVAL_NANOS)
            ));
        }
        let flush = opt_duration(&self.flush_interval, "FlushInterval")?;
        if flush != 0 && flush < MIN_FLUSH_INTERVAL_NANOS {
            return fail(format!(
                "invalid FlushInterval ({}; expected >= {})",
                format_go_duration(flush),
                format_go_duration(MIN_FLUSH_INTERVAL_NANOS)
            ));
        }
        // Any retention is allowed, so long as Go could decode it.
        opt_duration(&self.retention, "Retention")?;
        check_template(&self.path_postfix_template, "postfix")
            .map_err(|e| Verr::new(e).ctx("PathPostfixTemplate"))?;
        Ok(())
    }
}

impl Check for journal_spec::Suspend {
    fn check(&self) -> VResult {
        if journal_spec::suspend::Level::try_from(self.level).is_err() {
            return Err(Verr::new(format!("invalid Level variant ({})", self.level)).ctx("Level"));
        }
        if self.offset < 0 {
            return Err(
                Verr::new(format!("invalid Offset ({}; expected >= 0)", self.offset)).ctx("Offset"),
            );
        }
        Ok(())
    }
}

pub(crate) fn check_flags(flags: u32) -> VResult {
    if crate::flags::is_valid(flags) {
        return Ok(());
    }
    // Go holds the flag in an int32.
    fail(format!("invalid combination ({})", flags as i32))
}

impl Check for JournalSpec {
    fn check(&self) -> VResult {
        use label_names::{NAME, PREFIX};
        check_journal(&self.name).map_err(|e| e.ctx("Name"))?;
        let (_, meta) = split_meta(&self.name);
        if !meta.is_empty() {
            return fail(format!(
                "Name cannot have a metadata path segment ({meta}; expected no segment)"
            ));
        }
        if self.replication < 1 || self.replication > MAX_JOURNAL_REPLICATION {
            return fail(format!(
                "invalid Replication ({}; expected 1 <= Replication <= {MAX_JOURNAL_REPLICATION})",
                self.replication
            ));
        }
        let labels = self.labels.clone().unwrap_or_default();
        check_label_set(&labels, false).map_err(|e| e.ctx("Labels"))?;
        if first_value(&labels, NAME).is_some() {
            return fail(format!("Labels cannot include label {}", go_quote(NAME)));
        }
        if first_value(&labels, PREFIX).is_some() {
            return fail(format!("Labels cannot include label {}", go_quote(PREFIX)));
        }
        check_journal_label_constraints(&labels).map_err(|e| e.ctx("Labels"))?;
        self.fragment
            .clone()
            .unwrap_or_default()
            .check()
            .map_err(|e| e.ctx("Fragment"))?;
        check_flags(self.flags).map_err(|e| e.ctx("Flags"))?;
        if self.max_append_rate < 0 {
            return fail(format!(
                "invalid MaxAppendRate ({}; expected >= 0)",
                self.max_append_rate
            ));
        }
        self.suspend
            .unwrap_or_default()
            .check()
            .map_err(|e| e.ctx("Suspend"))?;
        Ok(())
    }
}

impl Check for process_spec::Id {
    fn check(&self) -> VResult {
        check_token(&self.zone, TOKEN_SYMBOLS, MIN_ZONE_LEN, MAX_ZONE_LEN)
            .map_err(|e| e.ctx("Zone"))?;
        check_token(
            &self.suffix,
            TOKEN_SYMBOLS,
            MIN_BROKER_SUFFIX_LEN,
            MAX_BROKER_SUFFIX_LEN,
        )
        .map_err(|e| e.ctx("Suffix"))?;
        Ok(())
    }
}

impl Check for ProcessSpec {
    fn check(&self) -> VResult {
        self.id
            .clone()
            .unwrap_or_default()
            .check()
            .map_err(|e| e.ctx("Id"))?;
        check_endpoint(&self.endpoint).map_err(|e| e.ctx("Endpoint"))?;
        Ok(())
    }
}

impl Check for BrokerSpec {
    fn check(&self) -> VResult {
        self.process_spec.clone().unwrap_or_default().check()?;
        if self.journal_limit > MAX_BROKER_JOURNAL_LIMIT {
            return fail(format!(
                "invalid JournalLimit ({}; expected 0 <= JournalLimit <= {MAX_BROKER_JOURNAL_LIMIT})",
                self.journal_limit
            ));
        }
        Ok(())
    }
}

pub(crate) fn id_struct(id: &process_spec::Id) -> String {
    format!("{{Zone:{} Suffix:{}}}", id.zone, id.suffix)
}

impl Check for Route {
    fn check(&self) -> VResult {
        let mut prev: Option<&process_spec::Id> = None;
        for (i, m) in self.members.iter().enumerate() {
            m.check().map_err(|e| e.ctx(format!("Members[{i}]")))?;
            if let Some(p) = prev.replace(m)
                && (&p.zone, &p.suffix) >= (&m.zone, &m.suffix)
            {
                return fail(format!(
                    "Members not in unique, sorted order (index {i}; {} <= {})",
                    id_struct(p),
                    id_struct(m)
                ));
            }
        }
        let n = self.members.len();
        if self.primary < -1 || i64::from(self.primary) >= n as i64 {
            return fail(format!(
                "invalid Primary ({}; expected -1 <= Primary < {n})",
                self.primary
            ));
        }
        let l = self.endpoints.len();
        if l != 0 && l != n {
            return fail(format!(
                "len(Endpoints) != 0, and != len(Members) ({l} vs {n})"
            ));
        }
        for (i, ep) in self.endpoints.iter().enumerate() {
            if !ep.is_empty() {
                check_endpoint(ep).map_err(|e| e.ctx(format!("Endpoints[{i}]")))?;
            }
        }
        Ok(())
    }
}

impl Check for header::Etcd {
    fn check(&self) -> VResult {
        if self.cluster_id == 0 {
            fail("invalid ClusterId (expected != 0)")
        } else if self.member_id == 0 {
            fail("invalid MemberId (expected != 0)")
        } else if self.revision <= 0 {
            fail(format!(
                "invalid Revision ({}; expected 0 < revision)",
                self.revision
            ))
        } else if self.raft_term == 0 {
            fail("invalid RaftTerm (expected != 0)")
        } else {
            Ok(())
        }
    }
}

impl Check for Header {
    fn check(&self) -> VResult {
        if let Some(id) = &self.process_id
            && *id != process_spec::Id::default()
        {
            id.check().map_err(|e| e.ctx("ProcessId"))?;
        }
        self.route
            .clone()
            .unwrap_or_default()
            .check()
            .map_err(|e| e.ctx("Route"))?;
        self.etcd
            .unwrap_or_default()
            .check()
            .map_err(|e| e.ctx("Etcd"))?;
        Ok(())
    }
}

impl Check for Fragment {
    fn check(&self) -> VResult {
        check_journal(&self.journal).map_err(|e| e.ctx("Journal"))?;
        if self.begin > self.end {
            return fail(format!(
                "expected Begin <= End (have {}, {})",
                self.begin, self.end
            ));
        }
        check_codec(self.compression_codec).map_err(|e| e.ctx("CompressionCodec"))?;
        check_path_component(&self.path_postfix, 0, MAX_JOURNAL_NAME_LEN)
            .map_err(|e| e.ctx("PathPostfix"))?;
        Ok(())
    }
}

pub(crate) fn check_opt_header(h: &Option<Header>) -> VResult {
    match h {
        Some(h) => h.check().map_err(|e| e.ctx("Header")),
        None => Ok(()),
    }
}

pub(crate) fn check_header(h: &Option<Header>) -> VResult {
    h.clone()
        .unwrap_or_default()
        .check()
        .map_err(|e| e.ctx("Header"))
}
