//! Reads: [`ReadStream`] (one Read RPC, Go's `client.Reader` without its retries) and
//! [`RetryReader`] (Go's `client.RetryReader`): a read from an offset (or −1, the write
//! head) that resumes at its next offset after errors, reports offset jumps by the offsets
//! of its chunks, and follows the journal into its fragment stores when a broker hands it a
//! persisted fragment's URL.
//!
//! Lives on: the task that owns the reader; Route and connection state is the client's.

use crate::client::{Client, Dispatch};
use crate::fragment::{self, FragmentReader, Opened};
use crate::message::ByteSource;
use crate::retry::Retry;
use crate::{Error, error::status_name};
use bytes::Bytes;
use protocol::grpc::{ClientCall, Code, RpcError};
use protocol::method::Method;
use protocol::validate::validate_journal_name;
use protocol::{Fragment, ReadRequest, ReadResponse, Route, Status};

/// One Read RPC's responses, in order. Response Headers update the client's route cache.
pub struct ReadStream {
    client: Client,
    journal: String,
    offset: i64,
    call: ClientCall,
}

impl Client {
    /// Starts one Read RPC for `req` (no retries: see [`RetryReader`]), at a member of the
    /// journal's cached Route if there is one.
    pub async fn read(&self, req: ReadRequest) -> Result<ReadStream, Error> {
        check_read(&req)?;
        let (_, call) = self
            .open_read(&req, None)
            .await
            .map_err(|e| Error::rpc(&req.journal, e))?;
        Ok(ReadStream {
            client: self.clone(),
            journal: req.journal.clone(),
            offset: req.offset,
            call,
        })
    }

    async fn open_read(
        &self,
        req: &ReadRequest,
        route: Option<&Route>,
    ) -> Result<(Dispatch, ClientCall), RpcError> {
        let dispatch = self.dispatch(Some(&req.journal), route, false).await?;
        match dispatch
            .channel
            .server_streaming(Method::Read.path(), req)
            .await
        {
            Ok(call) => Ok((dispatch, call)),
            Err(e) => {
                self.transport_failed(&dispatch, Some(&req.journal));
                Err(e)
            }
        }
    }
}

impl ReadStream {
    /// The next response, `None` at the end of the stream.
    pub async fn next(&mut self) -> Result<Option<ReadResponse>, Error> {
        let resp = self
            .call
            .next::<ReadResponse>()
            .await
            .map_err(|e| Error::Rpc {
                journal: self.journal.clone(),
                code: e.code,
                message: format!("read at offset {}: {}", self.offset, e.message),
            })?;
        if let Some(r) = &resp {
            if let Some(h) = &r.header {
                self.client.update_route(&self.journal, h.route.as_ref());
            }
            self.offset = r.offset + r.content.len() as i64;
        }
        Ok(resp)
    }
}

fn check_read(req: &ReadRequest) -> Result<(), Error> {
    validate_journal_name(&req.journal)
        .map_err(|e| Error::Invalid(format!("journal {:?}: invalid name: {e}", req.journal)))?;
    if req.offset < -1 {
        return Err(Error::Invalid(format!(
            "journal {}: invalid read offset {} (want -1 for the write head, or >= 0)",
            req.journal, req.offset
        )));
    }
    if req.end_offset != 0 && req.end_offset < req.offset {
        return Err(Error::Invalid(format!(
            "journal {}: end offset {} is before the read offset {}",
            req.journal, req.end_offset, req.offset
        )));
    }
    Ok(())
}

/// What a [`RetryReader`] reads from now.
enum Source {
    None,
    Stream(Box<StreamState>),
    Direct(Box<FragmentReader>),
}

/// An open Read RPC and what its last metadata response said.
struct StreamState {
    dispatch: Dispatch,
    call: ClientCall,
    /// The status of the last metadata response (content chunks leave it).
    status: i32,
    /// The fragment and URL of the last metadata response, cleared by content.
    fragment: Option<Fragment>,
    url: String,
}

/// A read that survives errors: see the module documentation.
pub struct RetryReader {
    client: Client,
    req: ReadRequest,
    source: Source,
    retry: Retry,
    /// The Route of the last response Header: a reopened read goes there first.
    route: Option<Route>,
    /// Persisted fragments below this offset are read through the broker (their
    /// `file://` URL cannot be opened without a file root).
    proxy_until: i64,
    fragment: Option<Fragment>,
    write_head: i64,
    /// `JOURNAL_NOT_FOUND` answers since the last success.
    not_found: u32,
    /// Fragments opened directly from their stores.
    fetched: u64,
}

impl RetryReader {
    /// A reader of `journal` from `offset` (−1: the write head). With `block`, it waits
    /// for content at the write head; without, [`RetryReader::next_chunk`] returns `None`
    /// there.
    pub fn new(
        client: &Client,
        journal: &str,
        offset: i64,
        block: bool,
    ) -> Result<RetryReader, Error> {
        RetryReader::with_request(
            client,
            ReadRequest {
                journal: journal.to_string(),
                offset,
                block,
                ..Default::default()
            },
        )
    }

    /// A reader of `req` (its `end_offset`, `begin_mod_time` are honoured). Its
    /// `do_not_proxy` is set as Gazette's consumers set it: when the client routes.
    pub fn with_request(client: &Client, mut req: ReadRequest) -> Result<RetryReader, Error> {
        check_read(&req)?;
        if req.metadata_only {
            return Err(Error::Invalid(format!(
                "journal {}: a RetryReader reads content; use Client::read for metadata-only reads",
                req.journal
            )));
        }
        req.do_not_proxy = client.routing();
        Ok(RetryReader {
            client: client.clone(),
            source: Source::None,
            retry: client.retry(),
            route: None,
            proxy_until: 0,
            fragment: None,
            write_head: 0,
            not_found: 0,
            fetched: 0,
            req,
        })
    }

    pub fn journal(&self) -> &str {
        &self.req.journal
    }

    /// The next offset to be read (−1 until the write head is known).
    pub fn offset(&self) -> i64 {
        self.req.offset
    }

    /// The fragment the last content came from, as the broker described it.
    pub fn fragment(&self) -> Option<&Fragment> {
        self.fragment.as_ref()
    }

    /// The journal's write head, as of the last metadata response.
    pub fn write_head(&self) -> i64 {
        self.write_head
    }

    /// How many persisted fragments this reader fetched directly from their stores
    /// (rather than through a broker).
    pub fn fragments_fetched(&self) -> u64 {
        self.fetched
    }

    /// Restarts the read at `offset` (a seek).
    pub fn seek(&mut self, offset: i64) {
        self.source = Source::None;
        self.req.offset = offset;
    }

    /// The next chunk of content and its offset, which is past the previous chunk's end
    /// when the journal's offsets jumped (removed fragments, or a read from −1). `None` at
    /// the write head of a non-blocking read, or at the end offset.
    pub async fn next_chunk(&mut self) -> Result<Option<(i64, Bytes)>, Error> {
        loop {
            if self.req.end_offset != 0 && self.req.offset >= self.req.end_offset {
                return Ok(None);
            }
            let step = match &mut self.source {
                Source::None => self.open().await,
                Source::Stream(_) => self.step_stream().await,
                Source::Direct(_) => self.step_fragment().await,
            };
            match step {
                Step::Chunk(offset, mut bytes) => {
                    if self.req.end_offset != 0 {
                        let room = (self.req.end_offset - offset).max(0) as usize;
                        bytes.truncate(room);
                    }
                    self.req.offset = offset + bytes.len() as i64;
                    self.retry.reset();
                    self.not_found = 0;
                    return Ok(Some((offset, bytes)));
                }
                Step::Continue => {}
                Step::End => return Ok(None),
                Step::Retry(err) => {
                    self.source = Source::None;
                    let what = self.context();
                    self.retry.wait(|| what, err).await?;
                }
                Step::Fail(err) => {
                    self.source = Source::None;
                    return Err(err);
                }
            }
        }
    }

    fn context(&self) -> String {
        format!("journal {} at offset {}", self.req.journal, self.req.offset)
    }

    async fn open(&mut self) -> Step {
        let mut req = self.req.clone();
        if req.offset >= 0 && req.offset < self.proxy_until {
            req.do_not_proxy = false;
        }
        match self.client.open_read(&req, self.route.as_ref()).await {
            Ok((dispatch, call)) => {
                self.source = Source::Stream(Box::new(StreamState {
                    dispatch,
                    call,
                    status: Status::Ok as i32,
                    fragment: None,
                    url: String::new(),
                }));
                Step::Continue
            }
            Err(e) => self.rpc_failed(e),
        }
    }

    /// Handles one message (or the end) of the Read RPC.
    async fn step_stream(&mut self) -> Step {
        let Source::Stream(s) = &mut self.source else {
            unreachable!("called with a stream source")
        };
        match s.call.next::<ReadResponse>().await {
            Ok(Some(resp)) => self.response(resp),
            Ok(None) => self.stream_ended().await,
            Err(e) => {
                self.client.transport_failed(&s.dispatch, None);
                self.rpc_failed(e)
            }
        }
    }

    fn response(&mut self, resp: ReadResponse) -> Step {
        let Source::Stream(s) = &mut self.source else {
            unreachable!("called with a stream source")
        };
        if let Some(h) = &resp.header {
            self.client
                .update_route(&self.req.journal, h.route.as_ref());
            self.route = h.route.clone().filter(|r| !r.members.is_empty());
        }
        let ok = resp.status == Status::Ok as i32;
        if ok && self.req.offset >= 0 && resp.offset < self.req.offset {
            return Step::Fail(Error::Protocol {
                journal: self.req.journal.clone(),
                offset: self.req.offset,
                detail: format!(
                    "a response at offset {} (expected >= {})",
                    resp.offset, self.req.offset
                ),
            });
        }
        if !resp.content.is_empty() {
            s.url.clear();
            return Step::Chunk(resp.offset, resp.content);
        }
        s.status = resp.status;
        s.fragment = resp.fragment.clone();
        s.url = resp.fragment_url;
        if resp.fragment.is_some() {
            self.fragment = resp.fragment;
            self.write_head = resp.write_head;
        }
        // An offset jump (or the write head of a read from -1): continue from there.
        if (ok || resp.status == Status::OffsetNotYetAvailable as i32)
            && resp.offset > self.req.offset
        {
            self.req.offset = resp.offset;
        }
        if resp.status == Status::OffsetNotYetAvailable as i32 {
            self.write_head = resp.write_head;
        }
        Step::Continue
    }

    /// The broker closed the stream: open the fragment it pointed at, resume, or map the
    /// status of its last response.
    async fn stream_ended(&mut self) -> Step {
        let Source::Stream(s) = std::mem::replace(&mut self.source, Source::None) else {
            unreachable!("called with a stream source")
        };
        let journal = self.req.journal.clone();
        let status = Status::try_from(s.status).unwrap_or(Status::Ok);
        if status == Status::Ok {
            if let (Some(fragment), false) =
                (s.fragment, s.url.is_empty() || self.req.metadata_only)
            {
                return self.open_fragment(fragment, &s.url).await;
            }
            // A clean end (the broker's assignment changed, or it is shutting down): resume
            // at once.
            self.retry.reset();
            return Step::Continue;
        }
        let err = Error::Status {
            journal: journal.clone(),
            status: format!("{} (at offset {})", status_name(s.status), self.req.offset),
        };
        match status {
            Status::OffsetNotYetAvailable if !self.req.block => Step::End,
            Status::OffsetNotYetAvailable => Step::Retry(err),
            Status::JournalNotFound => {
                self.not_found += 1;
                if self.not_found > 3 {
                    Step::Fail(err)
                } else {
                    Step::Retry(err)
                }
            }
            Status::Suspended | Status::NotAllowed => Step::Fail(err),
            _ => Step::Retry(err),
        }
    }

    async fn open_fragment(&mut self, fragment: Fragment, url: &str) -> Step {
        match fragment::open(
            &self.client,
            &self.req.journal,
            &fragment,
            url,
            self.req.offset,
        )
        .await
        {
            Ok(Opened::Reader(reader)) => {
                self.fetched += 1;
                self.fragment = Some(reader.fragment().clone());
                self.source = Source::Direct(reader);
                Step::Continue
            }
            Ok(Opened::NoFileRoot) => {
                // The broker streams this fragment instead.
                self.proxy_until = fragment.end;
                Step::Continue
            }
            Err(e) if e.retry => Step::Retry(e.error),
            Err(e) => Step::Fail(e.error),
        }
    }

    async fn step_fragment(&mut self) -> Step {
        let Source::Direct(reader) = &mut self.source else {
            unreachable!("called with a fragment source")
        };
        match reader.next_chunk().await {
            Ok(Some((offset, bytes))) => Step::Chunk(offset, bytes),
            Ok(None) => {
                // The fragment was read through its end: ask the broker for what follows.
                self.req.offset = self.req.offset.max(reader.fragment().end);
                self.source = Source::None;
                Step::Continue
            }
            Err(e) if e.retry => Step::Retry(e.error),
            Err(e) => Step::Fail(e.error),
        }
    }

    fn rpc_failed(&mut self, e: RpcError) -> Step {
        if e.code == Code::Unavailable {
            self.route = None;
        }
        let err = Error::Rpc {
            journal: self.req.journal.clone(),
            code: e.code,
            message: format!("read at offset {}: {}", self.req.offset, e.message),
        };
        // Gazette's reader retries every failure but context errors; refusals that another
        // attempt cannot change are surfaced instead of retried until the timeout.
        let final_codes = [
            Code::InvalidArgument,
            Code::Unauthenticated,
            Code::PermissionDenied,
            Code::Unimplemented,
            Code::ResourceExhausted,
        ];
        if final_codes.contains(&e.code) {
            Step::Fail(err)
        } else {
            Step::Retry(err)
        }
    }
}

/// What one step of a [`RetryReader`] produced.
enum Step {
    Chunk(i64, Bytes),
    Continue,
    End,
    Retry(Error),
    Fail(Error),
}

impl ByteSource for RetryReader {
    fn next_chunk(&mut self) -> impl Future<Output = Result<Option<(i64, Bytes)>, Error>> + Send {
        RetryReader::next_chunk(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_read_requests_are_refused_before_any_call() {
        let client = Client::new(&["http://127.0.0.1:1"]).unwrap();
        let err = RetryReader::new(&client, "bad name", 0, false)
            .err()
            .unwrap();
        assert!(
            err.to_string()
                .starts_with("journal \"bad name\": invalid name"),
            "{err}"
        );
        let err = RetryReader::new(&client, "a/jj", -2, false).err().unwrap();
        assert!(err.to_string().contains("invalid read offset -2"), "{err}");
        let req = ReadRequest {
            journal: "a/jj".into(),
            offset: 10,
            end_offset: 5,
            ..Default::default()
        };
        let err = RetryReader::with_request(&client, req.clone())
            .err()
            .unwrap();
        assert!(err.to_string().contains("end offset 5 is before"), "{err}");
        let req = ReadRequest {
            end_offset: 0,
            metadata_only: true,
            ..req
        };
        let err = RetryReader::with_request(&client, req).err().unwrap();
        assert!(err.to_string().contains("metadata-only"), "{err}");
        // Routing clients ask brokers not to proxy, as Gazette's consumers do.
        let reader = RetryReader::new(&client, "a/jj", 0, false).unwrap();
        assert!(reader.req.do_not_proxy);
    }
}
