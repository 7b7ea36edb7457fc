//! Queries: a filter, a projection and limits, read as a stream of entities
//! across continuation tokens, or page by page with a resumable [`Continuation`].

use std::fmt;

use futures::stream::{self, BoxStream, Stream, StreamExt, TryStreamExt};

pub use super::handle::ScanPolicy;
use super::handle::TableHandle;
#[cfg(feature = "durable")]
use crate::backend::Payload;
use crate::backend::{Operation, Response};
use crate::columns::EntityColumns;
use crate::continuation::Continuation;
use crate::entity::{EntityKey, TableEntity};
use crate::error::{Error, Result, ValidationError};
use crate::filter::{self, Filter, QueryPlan, RawFilter, MAX_COMPARISONS};
use crate::validate::{self, MAX_PAGE_SIZE};

/// Empty pages in a row, each with a continuation, after which a query gives
/// up (see [`Query::pages`]).
const MAX_EMPTY_PAGES: usize = 10_000;

/// The entities of a fetched page: decoded, or a store file's page left to
/// be decoded an entity at a time as a stream reads them (each entity's
/// memory is then reused by the next; a page decoded at once frees a
/// thousand entities' allocations together, which cost a fifth of a full
/// scan's time in the allocator).
enum Entities<T> {
    Decoded(Vec<T>),
    /// The first `len` entities of a page of records.
    #[cfg(feature = "durable")]
    Rows {
        payload: Payload,
        len: usize,
    },
}

impl<T: TableEntity> Entities<T> {
    fn len(&self) -> usize {
        match self {
            Entities::Decoded(items) => items.len(),
            #[cfg(feature = "durable")]
            Entities::Rows { len, .. } => *len,
        }
    }

    fn truncate(&mut self, n: usize) {
        match self {
            Entities::Decoded(items) => items.truncate(n),
            #[cfg(feature = "durable")]
            Entities::Rows { len, .. } => *len = (*len).min(n),
        }
    }

    /// The entities, all decoded.
    fn decode(self) -> Result<Vec<T>> {
        match self {
            Entities::Decoded(items) => Ok(items),
            #[cfg(feature = "durable")]
            Entities::Rows { payload, len } => {
                let mut items = Vec::with_capacity(len);
                payload.decode_into(&mut items)?;
                items.truncate(len);
                Ok(items)
            }
        }
    }

    /// The entities as a stream, each decoded when it is read.
    fn into_stream(self) -> BoxStream<'static, Result<T>> {
        match self {
            Entities::Decoded(items) => stream::iter(items.into_iter().map(Ok)).boxed(),
            #[cfg(feature = "durable")]
            Entities::Rows { payload, len } => stream::iter(payload.decode_each(len)).boxed(),
        }
    }
}

/// One page of a query: its entities and where the next page starts.
///
/// A page may hold fewer entities than asked for, even none, and still have a
/// continuation: only a missing continuation means the results are exhausted.
#[derive(Debug, Clone)]
pub struct Page<T> {
    /// The entities of this page, in (PartitionKey, RowKey) order.
    pub items: Vec<T>,
    /// Where the next page starts; `None` on the last page.
    pub continuation: Option<Continuation>,
}

/// A query over a table, built by value and run with one of the readers, named
/// as in sqlx:
///
/// | reader | gives | requests |
/// |---|---|---|
/// | [`stream`](Query::stream) | an [`EntityStream`] of `T` | as many pages as the stream is read |
/// | [`fetch_all`](Query::fetch_all) | `Vec<T>` | every page (or until [`take`](Query::take)) |
/// | [`fetch_one`](Query::fetch_one) | `T`; an error if nothing matches | until the first entity |
/// | [`fetch_optional`](Query::fetch_optional) | `Option<T>` | until the first entity |
/// | [`pages`](Query::pages), [`next_page`](Query::next_page) | [`Page`]s with a resumable [`Continuation`] | one per page |
///
/// [`take`](Query::take) bounds the total number of entities, [`page_size`](Query::page_size)
/// the number per request.
///
/// ```no_run
/// # async fn run(table: tablekit::TableClient<tablekit::DynamicEntity>) -> tablekit::Result<()> {
/// use futures::TryStreamExt;
/// let mut rows = table
///     .query()
///     .filter(|e| e.partition_key.eq("Sales") & e.col::<i32>("Age").ge(30))
///     .take(10)
///     .stream();
/// while let Some(e) = rows.try_next().await? {
///     println!("{}", e.row_key);
/// }
/// # Ok(()) }
/// ```
#[must_use = "a query does nothing until streamed or fetched"]
pub struct Query<T> {
    table: TableHandle,
    _t: std::marker::PhantomData<fn() -> T>,
    filter: Option<FilterSpec<T>>,
    select: Option<String>,
    top: Option<usize>,
    take: Option<usize>,
    continuation: Option<Continuation>,
}

impl<T> fmt::Debug for Query<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Query")
            .field("table", &self.table.name())
            .field("filter", &self.filter)
            .field("select", &self.select)
            .field("page_size", &self.top)
            .field("take", &self.take)
            .field("continuation", &self.continuation)
            .finish()
    }
}

impl<T: TableEntity> Query<T> {
    pub(crate) fn new(table: TableHandle) -> Self {
        Query {
            _t: std::marker::PhantomData,
            table,
            filter: None,
            select: T::select().map(join_select),
            top: None,
            take: None,
            continuation: None,
        }
    }

    /// A filter written over the entity's typed columns:
    /// `.filter(|e| e.department.eq("Sales") & e.age.ge(30))`. A comparison with
    /// a value of another type does not compile; string values are escaped.
    /// Calling it again replaces the filter.
    ///
    /// # Which way to filter
    ///
    /// Reach for this one first. The others exist for what it cannot say:
    ///
    /// | way | when |
    /// |---|---|
    /// | `.filter(\|e\| e.age.ge(30) & e.name.eq(n))` | the default: typed, escaped, checked by the compiler |
    /// | `.filter(filter!(\|e\| e.age >= 30 && e.name == n))` | the same tree written with Rust operators (the macro rewrites them into the calls above) |
    /// | [`filter_by`](Query::filter_by)`(f)` | a [`Filter<T>`] built elsewhere: composed at run time, returned by a function, or untyped through [`col`](crate::filter::col) |
    /// | [`filter_raw`](Query::filter_raw)`(odata!("Age ge {age}"))` | OData text with values escaped by [`odata!`](crate::odata): porting filters from other SDKs or config files |
    /// | [`filter_raw`](Query::filter_raw)`("Age ge 30")` | OData text as is, parsed before any request; never with user input pasted in |
    pub fn filter<F, R>(self, build: F) -> Self
    where
        T: EntityColumns,
        F: FnOnce(&T::Columns) -> R,
        R: Into<Filter<T>>,
    {
        self.filter_by(build(T::columns()))
    }

    /// A filter built beforehand, such as `col::<i32>("Age").ge(30)`.
    pub fn filter_by(mut self, filter: impl Into<Filter<T>>) -> Self {
        self.filter = Some(FilterSpec::Typed(filter.into()));
        self
    }

    /// A filter written in OData, such as `PartitionKey eq 'p1' and Age ge 30`.
    /// It is parsed before any request: a syntax error, a comparison between two
    /// properties or more than 15 comparisons fail here. String literals inside
    /// must have their `'` doubled; prefer [`Query::filter`], which escapes for you.
    pub fn filter_raw(mut self, odata: impl Into<RawFilter>) -> Self {
        self.filter = Some(FilterSpec::Raw(odata.into()));
        self
    }

    /// How the service will serve this query (point read, partition range,
    /// partition scan, table range or table scan), the querying guide's ranking.
    pub fn plan(&self) -> Result<QueryPlan> {
        Ok(self.resolve()?.plan)
    }

    /// How many requests this query is expected to take, where that can be
    /// said before running it: 1 for a point read (a filter of exactly
    /// `PartitionKey eq` and `RowKey eq`), and for a query bounded by
    /// [`take`](Query::take) whose filter has no condition beyond the keys
    /// (no filter, or key ranges only) the pages that `take` fills at the
    /// page size ([`page_size`](Query::page_size), else 1,000), fewer if
    /// the table holds fewer entities. `None` otherwise: how many entities
    /// a filter on other properties skips, and how many pages the service
    /// cuts across its partition servers, is known only by running it.
    ///
    /// ```
    /// use tablekit::{DynamicEntity, TableServiceClient};
    /// let t = TableServiceClient::embedded().table::<DynamicEntity>("Plans")?;
    /// let point = t.query().filter_raw("PartitionKey eq 'p' and RowKey eq 'r'");
    /// assert_eq!(point.plan()?.name(), "point");
    /// assert_eq!(point.expected_requests()?, Some(1));
    /// let range = t.query().filter_raw("PartitionKey eq 'p' and RowKey ge 'a'");
    /// assert_eq!(range.page_size(100).take(250).expected_requests()?, Some(3));
    /// let scan = t.query().filter_raw("Age gt 30");
    /// assert_eq!(scan.take(10).expected_requests()?, None);
    /// # Ok::<(), tablekit::Error>(())
    /// ```
    pub fn expected_requests(&self) -> Result<Option<u64>> {
        let resolved = self.resolve()?;
        if resolved.point.is_some() {
            return Ok(Some(1));
        }
        let keys_only = match &self.filter {
            None => true,
            Some(_) => resolved
                .text
                .as_deref()
                .map(filter::parse)
                .transpose()
                .map_err(Error::from)?
                .is_some_and(|e| filter::keys_only(&e)),
        };
        Ok(match (self.take, keys_only) {
            (Some(0), _) => Some(0),
            (Some(n), true) => {
                let page = self.top.unwrap_or(MAX_PAGE_SIZE).max(1);
                Some(n.div_ceil(page) as u64)
            }
            _ => None,
        })
    }

    /// The `$filter` text this query sends, if any.
    pub fn filter_text(&self) -> Result<Option<String>> {
        Ok(self.resolve()?.text)
    }

    fn resolve(&self) -> Result<Resolved> {
        let (text, expr) = match &self.filter {
            None => (None, None),
            Some(FilterSpec::Typed(f)) => {
                let e = f.expr()?.clone();
                (Some(e.to_string()), Some(e))
            }
            Some(FilterSpec::Raw(raw)) => {
                let text = raw.text().map_err(|reason| {
                    Error::invalid(ValidationError::Query {
                        reason: reason.to_owned(),
                    })
                })?;
                if text.trim().is_empty() {
                    return Err(Error::invalid(ValidationError::Query {
                        reason: "the filter is empty".into(),
                    }));
                }
                let e = filter::parse(text).map_err(Error::from)?;
                let n = e.comparisons();
                if n > MAX_COMPARISONS {
                    return Err(Error::invalid(ValidationError::Query {
                        reason: format!(
                            "the filter has {n} comparisons; the service allows at most {MAX_COMPARISONS}"
                        ),
                    }));
                }
                (Some(text.to_owned()), Some(e))
            }
        };
        if let Some(e) = &expr {
            refuse_encrypted_filter(e, T::encrypted_properties())?;
        }
        let (plan, residual) = filter::plan_with_residual(expr.as_ref());
        Ok(Resolved {
            text,
            point: match (&plan, residual) {
                (
                    QueryPlan::Point {
                        partition_key,
                        row_key,
                    },
                    false,
                    // A key no entity can have (a '/' from user input, say) is still
                    // a valid filter value: such a query runs as a filter, finding nothing.
                ) => Some(EntityKey::new(partition_key.clone(), row_key.clone()))
                    .filter(|k| k.validate().is_ok()),
                _ => None,
            },
            plan,
        })
    }

    /// Reads only these properties (`$select`); keys and system properties always come.
    pub fn select<I, S>(mut self, properties: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.select = Some(join_select(properties));
        self
    }

    /// At most `n` entities per request (1 to 1000; the service's `$top`). It
    /// bounds the size of each page, not the result: the query still follows
    /// continuation tokens for the rest. To bound the result, use [`take`](Query::take).
    pub fn page_size(mut self, n: usize) -> Self {
        self.top = Some(n);
        self
    }

    /// At most `n` entities in all (LINQ's `Take`): the query stops fetching once
    /// `n` have arrived, and asks each page for no more than it still needs.
    pub fn take(mut self, n: usize) -> Self {
        self.take = Some(n);
        self
    }

    /// Resumes from a continuation of an earlier page.
    pub fn continue_from(mut self, continuation: Continuation) -> Self {
        self.continuation = Some(continuation);
        self
    }

    fn check(&self) -> Result<Resolved> {
        if let Some(n) = self.top {
            if !(1..=MAX_PAGE_SIZE).contains(&n) {
                return Err(Error::invalid(ValidationError::PageSize {
                    value: n,
                    max: MAX_PAGE_SIZE,
                }));
            }
        }
        if let Some(s) = &self.select {
            validate_select(s)?;
        }
        let resolved = self.resolve()?;
        let policy = self.table.scan_policy();
        if resolved.plan == QueryPlan::TableScan {
            match policy {
                ScanPolicy::Allow => {}
                ScanPolicy::Warn => tracing::warn!(
                    table = self.table.name(),
                    filter = resolved.text.as_deref().unwrap_or(""),
                    "query reads the whole table (table scan)"
                ),
                ScanPolicy::Deny => {
                    return Err(Error::invalid(ValidationError::Query {
                        reason: format!(
                            "a table scan of {} is refused by the table's scan policy; name a PartitionKey (filter: {})",
                            self.table.name(),
                            resolved.text.as_deref().unwrap_or("none")
                        ),
                    }))
                }
            }
        }
        // A scan the policy already warns about is not warned about twice.
        if !(resolved.plan == QueryPlan::TableScan && policy == ScanPolicy::Warn) {
            self.table.stats.query_planned(
                self.table.name(),
                &resolved.plan,
                resolved.text.as_deref(),
            );
        }
        Ok(resolved)
    }

    /// Fetches one page starting at `continuation`, asking for at most `want`.
    async fn fetch(
        &self,
        resolved: &Resolved,
        continuation: Option<&Continuation>,
        want: Option<usize>,
    ) -> Result<Page<T>> {
        let (entities, continuation) = self
            .fetch_entities(resolved, continuation, want, false)
            .await?;
        Ok(Page {
            items: entities.decode()?,
            continuation,
        })
    }

    /// Fetches one page as [`fetch`](Self::fetch) does; with `lazy`, a page
    /// read from a store file is left to be decoded an entity at a time.
    async fn fetch_entities(
        &self,
        resolved: &Resolved,
        continuation: Option<&Continuation>,
        want: Option<usize>,
        #[cfg_attr(not(feature = "durable"), allow(unused_variables))] lazy: bool,
    ) -> Result<(Entities<T>, Option<Continuation>)> {
        if let (Some(key), None) = (&resolved.point, continuation) {
            // A point query is a point read: the cheapest request the service has.
            let items = self
                .table
                .get::<T>(key, self.select.as_deref())
                .await?
                .into_iter()
                .collect();
            return Ok((Entities::Decoded(items), None));
        }
        let top = match (self.top, want) {
            (Some(t), Some(w)) => Some(t.min(w)),
            (Some(t), None) => Some(t),
            (None, Some(w)) => Some(w.min(MAX_PAGE_SIZE)),
            (None, None) => None,
        };
        let sent = continuation;
        let resp = self
            .table
            .execute(Operation::Query {
                table: self.table.name(),
                filter: resolved.text.as_deref(),
                select: self.select.as_deref(),
                top,
                continuation,
                annotations: T::needs_type_annotations(),
            })
            .await?;
        let Response::Page {
            payload,
            continuation,
        } = resp
        else {
            return Err(Error::decode("unexpected answer to a query"));
        };
        if continuation.is_some() && continuation.as_ref() == sent {
            // Following it would ask for this very page again, forever.
            return Err(Error::decode(
                "the service answered a query page with the continuation it was sent",
            ));
        }
        let entities = match payload {
            #[cfg(feature = "durable")]
            payload @ Payload::Records { .. } if lazy => {
                let len = payload.stored_len().unwrap_or(0);
                Entities::Rows { payload, len }
            }
            payload => {
                let mut items = Vec::new();
                payload.decode_into(&mut items)?;
                Entities::Decoded(items)
            }
        };
        let partition = match &resolved.plan {
            QueryPlan::Point { partition_key, .. }
            | QueryPlan::PartitionRange { partition_key }
            | QueryPlan::PartitionScan { partition_key } => Some(partition_key.as_str()),
            _ => None,
        };
        self.table.page_read(partition, entities.len());
        Ok((entities, continuation))
    }

    /// Fetches the first page (or the page at the continuation given with
    /// [`Query::continue_from`]): one request.
    pub async fn next_page(&self) -> Result<Page<T>> {
        let resolved = self.check()?;
        let mut page = self
            .fetch(&resolved, self.continuation.as_ref(), self.take)
            .await?;
        if let Some(n) = self.take {
            page.items.truncate(n);
        }
        Ok(page)
    }

    /// The pages, following continuation tokens until the results (or `take`) end.
    /// Empty pages that carry a continuation are yielded too.
    ///
    /// A server that never lets a query end is stopped with an error: when a
    /// page carries the very continuation that asked for it (following it
    /// would bring the same page forever; [`Query::next_page`] refuses it
    /// too), or after 10,000 empty pages in a row. The service does answer
    /// empty pages with a continuation (each query step runs for at most five
    /// seconds), but 10,000 in a row are over 13 hours of fruitless scanning.
    pub fn pages(self) -> PageStream<T> {
        PageStream(
            self.entity_pages(false)
                .and_then(|(entities, continuation)| async move {
                    Ok(Page {
                        items: entities.decode()?,
                        continuation,
                    })
                })
                .boxed(),
        )
    }

    /// The pages as [`pages`](Self::pages) follows them, each page's
    /// entities left undecoded if `lazy` and the page allows it.
    fn entity_pages(
        self,
        lazy: bool,
    ) -> BoxStream<'static, Result<(Entities<T>, Option<Continuation>)>> {
        let resolved = match self.check() {
            Ok(r) => r,
            Err(e) => return stream::once(async move { Err(e) }).boxed(),
        };
        struct State<T> {
            query: Query<T>,
            resolved: Resolved,
            next: Option<Continuation>,
            remaining: Option<usize>,
            done: bool,
            /// Empty pages in a row, each with a continuation.
            empty_run: usize,
        }
        let state = State {
            resolved,
            next: self.continuation.clone(),
            remaining: self.take,
            done: self.take == Some(0),
            empty_run: 0,
            query: self,
        };
        stream::try_unfold(state, move |mut s| async move {
            if s.done {
                return Ok(None);
            }
            let mut page = s
                .query
                .fetch_entities(&s.resolved, s.next.as_ref(), s.remaining, lazy)
                .await?;
            if let Some(r) = &mut s.remaining {
                page.0.truncate(*r);
                *r -= page.0.len();
                if *r == 0 {
                    s.done = true;
                }
            }
            s.next = page.1.clone();
            if s.next.is_none() {
                s.done = true;
            } else if page.0.len() == 0 {
                s.empty_run += 1;
                if s.empty_run >= MAX_EMPTY_PAGES {
                    return Err(Error::decode(format!(
                        "{MAX_EMPTY_PAGES} empty query pages in a row, each with a continuation: \
                             given up (see Query::pages)"
                    )));
                }
            } else {
                s.empty_run = 0;
            }
            Ok(Some((page, s)))
        })
        .boxed()
    }

    /// The entities, one at a time, across as many pages as needed.
    pub fn stream(self) -> EntityStream<T> {
        EntityStream(
            self.entity_pages(true)
                .map_ok(|(entities, _)| entities.into_stream())
                .try_flatten()
                .boxed(),
        )
    }

    /// All the entities (or the first `take`).
    pub async fn fetch_all(self) -> Result<Vec<T>> {
        let mut all = Vec::new();
        let mut pages = self.pages();
        while let Some(page) = pages.try_next().await? {
            if all.is_empty() {
                all = page.items;
            } else {
                all.extend(page.items);
            }
        }
        Ok(all)
    }

    /// The first entity, if any; stops after it arrives.
    pub async fn fetch_optional(self) -> Result<Option<T>> {
        let mut s = self.take(1).stream();
        s.try_next().await
    }

    /// The first entity; an error ([`Error::is_not_found`], with no HTTP status)
    /// if nothing matches. Stops after it arrives.
    ///
    /// When several entities match, the first in the service's order
    /// (PartitionKey, then RowKey) is returned and the others are never
    /// fetched, as sqlx's `fetch_one` does: a query is not a uniqueness
    /// check. To insist on exactly one, read `take(2).fetch_all()` and look
    /// at its length.
    pub async fn fetch_one(self) -> Result<T> {
        let table = self.table.name.clone();
        self.fetch_optional()
            .await?
            .ok_or_else(|| Error::no_entity(&table))
    }
}

/// Refuses, before any I/O, a filter that compares a property stored
/// encrypted: the service holds its ciphertext (a fresh IV per entity), so
/// the comparison would silently match nothing, or the wrong entities.
pub(crate) fn refuse_encrypted_filter(expr: &filter::Expr, encrypted: &[&str]) -> Result<()> {
    fn walk<'e>(e: &'e filter::Expr, out: &mut Vec<&'e str>) {
        match e {
            filter::Expr::Cmp { property, .. } => out.push(property),
            filter::Expr::And(a, b) | filter::Expr::Or(a, b) => {
                walk(a, out);
                walk(b, out);
            }
            filter::Expr::Not(a) => walk(a, out),
        }
    }
    if encrypted.is_empty() {
        return Ok(());
    }
    let mut names = Vec::new();
    walk(expr, &mut names);
    match names.into_iter().find(|n| encrypted.contains(n)) {
        Some(name) => Err(Error::invalid(ValidationError::Encryption {
            reason: format!(
                "the filter compares {name}, which is stored encrypted: the service sees only its ciphertext, so no filter can compare it"
            ),
        })),
        None => Ok(()),
    }
}

enum FilterSpec<T> {
    Typed(Filter<T>),
    Raw(RawFilter),
}

impl<T> fmt::Debug for FilterSpec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FilterSpec::Typed(t) => fmt::Debug::fmt(t, f),
            FilterSpec::Raw(r) => write!(f, "Raw({r:?})"),
        }
    }
}

/// A query's filter, checked: its text, its plan, and the key of a point query
/// with no other condition.
struct Resolved {
    text: Option<String>,
    plan: QueryPlan,
    point: Option<EntityKey>,
}

/// The entities of a query; a [`Stream`] of `Result<T>`.
pub struct EntityStream<T>(BoxStream<'static, Result<T>>);

impl<T> EntityStream<T> {
    /// A stream of entities from any boxed stream (the encrypted table's
    /// decrypting stream).
    #[cfg_attr(not(feature = "encryption"), allow(dead_code))]
    pub(crate) fn from_boxed(s: BoxStream<'static, Result<T>>) -> Self {
        EntityStream(s)
    }
}

impl<T> fmt::Debug for EntityStream<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EntityStream")
    }
}

impl<T> Stream for EntityStream<T> {
    type Item = Result<T>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.as_mut().poll_next(cx)
    }
}

/// The pages of a query; a [`Stream`] of `Result<Page<T>>`.
pub struct PageStream<T>(BoxStream<'static, Result<Page<T>>>);

impl<T> fmt::Debug for PageStream<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PageStream")
    }
}

impl<T> Stream for PageStream<T> {
    type Item = Result<Page<T>>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.as_mut().poll_next(cx)
    }
}

/// `PartitionKey,RowKey,Timestamp,A,B,C` from property names: the service
/// returns only what `$select` names, and every reader needs the keys.
pub(crate) fn join_select<I, S>(properties: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut out = String::from("PartitionKey,RowKey,Timestamp");
    let system = out.len();
    for p in properties {
        let p = p.as_ref();
        if !matches!(p, "PartitionKey" | "RowKey" | "Timestamp") {
            out.push(',');
            out.push_str(p);
        }
    }
    if out.len() == system {
        // Selecting only system properties: an empty user selection stays detectable.
        out.push(',');
    }
    out
}

/// Each selected name must be a valid property name or a system property.
pub(crate) fn validate_select(select: &str) -> Result<()> {
    let select = select.trim_end_matches(',');
    if select.is_empty() {
        return Err(Error::invalid(ValidationError::Query {
            reason: "select names no property".into(),
        }));
    }
    for name in select.split(',') {
        if !matches!(name, "PartitionKey" | "RowKey" | "Timestamp") {
            validate::property_name(name)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuation_round_trips_through_text() {
        for c in [
            Continuation {
                next_partition_key: "1!8!cDAwMQ--".into(),
                next_row_key: None,
            },
            Continuation {
                next_partition_key: "a b%c".into(),
                next_row_key: Some("é ".into()),
            },
            Continuation {
                next_partition_key: "p".into(),
                next_row_key: Some(String::new()),
            },
        ] {
            let text = c.to_string();
            assert_eq!(text.parse::<Continuation>().unwrap(), c, "{text}");
        }
        assert!("".parse::<Continuation>().is_err());
        assert!("a b c".parse::<Continuation>().is_err());
        assert!("%FF".parse::<Continuation>().is_err());
    }

    #[test]
    fn select_always_asks_for_the_keys() {
        assert_eq!(
            join_select(["A", "RowKey", "B"]),
            "PartitionKey,RowKey,Timestamp,A,B"
        );
        assert_eq!(join_select(["RowKey"]), "PartitionKey,RowKey,Timestamp,");
        assert!(validate_select(&join_select(["RowKey"])).is_ok());
    }

    #[test]
    fn select_names_are_checked() {
        assert!(validate_select("A,RowKey,Timestamp").is_ok());
        assert!(validate_select("A,b-c").is_err());
        assert!(validate_select("").is_err());
    }
}
