//! The RPC messages of `protocol.Journal`.

#[allow(unused_imports)]
use super::*;

impl Check for ReadRequest {
    fn check(&self) -> VResult {
        check_opt_header(&self.header)?;
        check_journal(&self.journal).map_err(|e| e.ctx("Journal"))?;
        if self.offset < -1 {
            return fail(format!(
                "invalid Offset ({}; expected -1 <= Offset <= MaxInt64)",
                self.offset
            ));
        }
        if self.end_offset < 0 || (self.end_offset != 0 && self.end_offset < self.offset) {
            return fail(format!(
                "invalid EndOffset ({}; expected 0 or Offset <= EndOffset)",
                self.end_offset
            ));
        }
        Ok(())
    }
}

impl Check for ReadResponse {
    fn check(&self) -> VResult {
        check_status(self.status).map_err(|e| e.ctx("Status"))?;
        if !self.content.is_empty() {
            if self.status != Status::Ok as i32 {
                return fail(format!(
                    "unexpected Status with Content ({})",
                    status_name(self.status)
                ));
            } else if let Some(h) = &self.header {
                return fail(format!(
                    "unexpected Header with Content ({})",
                    text::header(h)
                ));
            } else if self.write_head != 0 {
                return fail(format!(
                    "unexpected WriteHead with Content ({})",
                    self.write_head
                ));
            } else if let Some(f) = &self.fragment {
                return fail(format!(
                    "unexpected Fragment with Content ({})",
                    text::fragment(f)
                ));
            } else if !self.fragment_url.is_empty() {
                return fail(format!(
                    "unexpected FragmentUrl with Content ({})",
                    self.fragment_url
                ));
            }
            return Ok(());
        }
        check_opt_header(&self.header)?;
        if self.write_head < 0 {
            return fail(format!(
                "invalid WriteHead ({}; expected >= 0)",
                self.write_head
            ));
        }
        if let Some(f) = &self.fragment {
            f.check().map_err(|e| e.ctx("Fragment"))?;
            if self.offset < f.begin || self.offset >= f.end {
                return fail(format!(
                    "invalid Offset ({}; expected {} <= offset < {})",
                    self.offset, f.begin, f.end
                ));
            } else if self.write_head < f.end {
                return fail(format!(
                    "invalid WriteHead ({}; expected >= {})",
                    self.write_head, f.end
                ));
            }
            if !self.fragment_url.is_empty() {
                parse_go_url(&self.fragment_url).map_err(|e| Verr::new(e).ctx("FragmentUrl"))?;
            }
        } else if self.status == Status::Ok as i32 && self.offset != 0 {
            return fail(format!(
                "unexpected Offset without Fragment or Content ({})",
                self.offset
            ));
        } else if !self.fragment_url.is_empty() {
            return fail(format!(
                "unexpected FragmentUrl without Fragment ({})",
                self.fragment_url
            ));
        }
        Ok(())
    }
}

/// Validates an AppendRequest as Gazette does. A request naming a journal is the first
/// message of the stream: it may carry a header, offset, register operations and a
/// suspend mode, but no content. Any other message is a content chunk (or, when wholly
/// empty, the commit marker) and may carry nothing but content.
impl Check for AppendRequest {
    fn check(&self) -> VResult {
        if !self.journal.is_empty() {
            check_opt_header(&self.header)?;
            check_journal(&self.journal).map_err(|e| e.ctx("Journal"))?;
            if self.offset < 0 {
                return fail(format!("invalid Offset ({}; expected >= 0)", self.offset));
            }
            if !self.content.is_empty() {
                return fail("unexpected Content");
            }
            if let Some(sel) = &self.check_registers {
                sel.check().map_err(|e| e.ctx("CheckRegisters"))?;
            }
            if let Some(set) = &self.union_registers {
                set.check().map_err(|e| e.ctx("UnionRegisters"))?;
            }
            if let Some(set) = &self.subtract_registers {
                set.check().map_err(|e| e.ctx("SubtractRegisters"))?;
            }
            if append_request::Suspend::try_from(self.suspend).is_err() {
                return Err(
                    Verr::new(format!("invalid Suspend variant ({})", self.suspend)).ctx("Suspend"),
                );
            }
            Ok(())
        } else if self.header.is_some() {
            fail("unexpected Header")
        } else if self.do_not_proxy {
            fail("unexpected DoNotProxy")
        } else if self.offset != 0 {
            fail("unexpected Offset")
        } else if self.check_registers.is_some() {
            fail("unexpected CheckRegisters")
        } else if self.union_registers.is_some() {
            fail("unexpected UnionRegisters")
        } else if self.subtract_registers.is_some() {
            fail("unexpected SubtractRegisters")
        } else if self.suspend != append_request::Suspend::Resume as i32 {
            fail(format!(
                "unexpected Suspend ({}; expected SUSPEND_RESUMED)",
                append_suspend_name(self.suspend)
            ))
        } else {
            Ok(())
        }
    }
}

impl Check for AppendResponse {
    fn check(&self) -> VResult {
        check_status(self.status).map_err(|e| e.ctx("Status"))?;
        check_header(&self.header)?;
        let ok = self.status == Status::Ok as i32;
        if ok && self.commit.is_none() {
            return fail("expected Commit");
        }
        if (ok || self.status == Status::RegisterMismatch as i32) && self.registers.is_none() {
            return fail("expected Registers");
        }
        if let Some(c) = &self.commit {
            c.check().map_err(|e| e.ctx("Commit"))?;
        }
        if let Some(r) = &self.registers {
            r.check().map_err(|e| e.ctx("Registers"))?;
        }
        Ok(())
    }
}

/// Validates a ReplicateRequest as Gazette does. Proposals (optionally with the header
/// of the stream's first message) carry registers but no content; other messages carry
/// only content. An empty `content` counts as absent, as protobuf cannot tell them
/// apart; a missing `registers` alongside a proposal counts as empty, as in Gazette.
impl Check for ReplicateRequest {
    fn check(&self) -> VResult {
        if let Some(proposal) = &self.proposal {
            if let Some(h) = &self.header {
                h.check().map_err(|e| e.ctx("Header"))?;
                if !self.acknowledge {
                    return fail("expected Acknowledge with Header");
                }
            }
            proposal.check().map_err(|e| e.ctx("Proposal"))?;
            if let Some(r) = &self.registers {
                r.check().map_err(|e| e.ctx("Registers"))?;
            }
            if !self.content.is_empty() {
                return fail(format!(
                    "unexpected Content with Proposal (len {})",
                    self.content.len()
                ));
            }
            if self.content_delta != 0 {
                return fail(format!(
                    "unexpected ContentDelta with Proposal ({})",
                    self.content_delta
                ));
            }
            if !self.deprecated_journal.is_empty() && self.deprecated_journal != proposal.journal {
                return fail(format!(
                    "DeprecatedJournal and Proposal.Journal mismatch ({} vs {})",
                    self.deprecated_journal, proposal.journal
                ));
            }
            return Ok(());
        }
        if self.content.is_empty() {
            fail("expected Content or Proposal")
        } else if self.content_delta < 0 {
            fail(format!(
                "invalid ContentDelta ({}; expected >= 0)",
                self.content_delta
            ))
        } else if let Some(h) = &self.header {
            fail(format!(
                "unexpected Header with Content ({})",
                text::header(h)
            ))
        } else if let Some(r) = &self.registers {
            fail(format!(
                "unexpected Registers with Content ({})",
                text::label_set(r)
            ))
        } else if self.acknowledge {
            fail("unexpected Acknowledge with Content")
        } else if !self.deprecated_journal.is_empty() {
            fail("unexpected DeprecatedJournal with Content")
        } else {
            Ok(())
        }
    }
}

impl Check for ReplicateResponse {
    fn check(&self) -> VResult {
        check_status(self.status).map_err(|e| e.ctx("Status"))?;
        if self.status == Status::WrongRoute as i32 {
            match &self.header {
                None => return fail("expected Header"),
                Some(h) => h.check().map_err(|e| e.ctx("Header"))?,
            }
        } else if let Some(h) = &self.header {
            return fail(format!("unexpected Header ({})", text::header(h)));
        }
        if self.status == Status::ProposalMismatch as i32 {
            let Some(f) = &self.fragment else {
                return fail("expected Fragment");
            };
            f.check().map_err(|e| e.ctx("Fragment"))?;
            let Some(r) = &self.registers else {
                return fail("expected Registers");
            };
            r.check().map_err(|e| e.ctx("Registers"))?;
        } else if let Some(f) = &self.fragment {
            return fail(format!("unexpected Fragment ({})", text::fragment(f)));
        } else if let Some(r) = &self.registers {
            return fail(format!("unexpected Registers ({})", text::label_set(r)));
        }
        Ok(())
    }
}

impl Check for ListRequest {
    fn check(&self) -> VResult {
        let sel = self.selector.clone().unwrap_or_default();
        sel.check().map_err(|e| e.ctx("Selector"))?;
        for (which, set) in [("Include", &sel.include), ("Exclude", &sel.exclude)] {
            let set = set.clone().unwrap_or_default();
            for v in crate::label_lookup::values_of(&set, label_names::PREFIX) {
                if !v.ends_with('/') {
                    return fail(format!(
                        "Selector.{which}.Labels[\"prefix\"]: expected trailing '/' ({v})"
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Check for list_response::Journal {
    fn check(&self) -> VResult {
        self.spec
            .clone()
            .unwrap_or_default()
            .check()
            .map_err(|e| e.ctx("Spec"))?;
        if self.mod_revision <= 0 {
            return fail(format!(
                "invalid ModRevision ({}; expected > 0)",
                self.mod_revision
            ));
        }
        self.route
            .clone()
            .unwrap_or_default()
            .check()
            .map_err(|e| e.ctx("Route"))?;
        Ok(())
    }
}

impl Check for ListResponse {
    fn check(&self) -> VResult {
        check_status(self.status).map_err(|e| e.ctx("Status"))?;
        check_header(&self.header)?;
        for (i, j) in self.journals.iter().enumerate() {
            j.check().map_err(|e| e.ctx(format!("Journals[{i}]")))?;
        }
        Ok(())
    }
}

impl Check for apply_request::Change {
    fn check(&self) -> VResult {
        if let Some(spec) = &self.upsert {
            if !self.delete.is_empty() {
                return fail("both Upsert and Delete are set (expected exactly one)");
            }
            spec.check().map_err(|e| e.ctx("Upsert"))?;
            if self.expect_mod_revision < -1 {
                return fail(format!(
                    "invalid ExpectModRevision ({}; expected >= 0 or -1)",
                    self.expect_mod_revision
                ));
            }
        } else if !self.delete.is_empty() {
            check_journal(&self.delete).map_err(|e| e.ctx("Delete"))?;
            if self.expect_mod_revision <= 0 && self.expect_mod_revision != -1 {
                return fail(format!(
                    "invalid ExpectModRevision ({}; expected > 0 or -1)",
                    self.expect_mod_revision
                ));
            }
        } else {
            return fail("neither Upsert nor Delete are set (expected exactly one)");
        }
        Ok(())
    }
}

impl Check for ApplyRequest {
    fn check(&self) -> VResult {
        for (i, c) in self.changes.iter().enumerate() {
            c.check().map_err(|e| e.ctx(format!("Changes[{i}]")))?;
        }
        Ok(())
    }
}

impl Check for ApplyResponse {
    fn check(&self) -> VResult {
        check_status(self.status).map_err(|e| e.ctx("Status"))?;
        check_header(&self.header)
    }
}

impl Check for FragmentsRequest {
    fn check(&self) -> VResult {
        check_opt_header(&self.header)?;
        check_journal(&self.journal).map_err(|e| e.ctx("Journal"))?;
        if self.end_mod_time != 0 && self.end_mod_time < self.begin_mod_time {
            return fail(format!(
                "invalid EndModTime ({} must be after {})",
                self.end_mod_time, self.begin_mod_time
            ));
        }
        if self.next_page_token < 0 {
            return fail(format!(
                "invalid NextPageToken ({}; must be >= 0)",
                self.next_page_token
            ));
        }
        if self.page_limit < 0 || self.page_limit > MAX_FRAGMENTS_PAGE_LIMIT {
            return fail(format!(
                "invalid PageLimit ({}; must be >= 0 and <= {MAX_FRAGMENTS_PAGE_LIMIT})",
                self.page_limit
            ));
        }
        if self.signature_ttl.is_some() {
            let ttl = opt_duration(&self.signature_ttl, "SignatureTTL")?;
            if ttl <= 0 {
                return fail(format!(
                    "invalid SignatureTTL ({}; must be > 0s)",
                    format_go_duration(ttl)
                ));
            }
        }
        Ok(())
    }
}

impl Check for fragments_response::Fragment {
    fn check(&self) -> VResult {
        self.spec
            .clone()
            .unwrap_or_default()
            .check()
            .map_err(|e| e.ctx("Spec"))?;
        parse_go_url(&self.signed_url).map_err(|e| Verr::new(e).ctx("SignedUrl"))?;
        Ok(())
    }
}

impl Check for FragmentsResponse {
    fn check(&self) -> VResult {
        check_status(self.status).map_err(|e| e.ctx("Status"))?;
        check_header(&self.header)?;
        for (i, f) in self.fragments.iter().enumerate() {
            f.check().map_err(|e| e.ctx(format!("Fragments[{i}]")))?;
        }
        Ok(())
    }
}

impl Check for FragmentStoreHealthRequest {
    fn check(&self) -> VResult {
        parse_store(&self.fragment_store).map_err(|e| e.ctx("FragmentStore"))?;
        let prefix = self.check_delete_prefix.as_str();
        if !prefix.is_empty() && !self.check_delete {
            return Err(
                Verr::new("cannot be set when CheckDelete is false").ctx("CheckDeletePrefix")
            );
        }
        if !prefix.is_empty() {
            let Some(trimmed) = prefix.strip_suffix('/') else {
                return Err(
                    Verr::new(format!("must end in '/' ({prefix})")).ctx("CheckDeletePrefix")
                );
            };
            if trimmed == ".." || trimmed.starts_with("../") {
                return Err(
                    Verr::new(format!("cannot traverse outside the store ({prefix})"))
                        .ctx("CheckDeletePrefix"),
                );
            }
            check_path_component(trimmed, 1, MAX_JOURNAL_NAME_LEN)
                .map_err(|e| e.ctx("CheckDeletePrefix"))?;
        }
        Ok(())
    }
}

impl Check for FragmentStoreHealthResponse {
    fn check(&self) -> VResult {
        check_status(self.status).map_err(|e| e.ctx("Status"))?;
        check_header(&self.header)
    }
}
