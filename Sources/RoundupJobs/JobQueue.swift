public import Foundation
import NIOCore
public import RoundupCore
public import RoundupRedis
import RoundupRuntime
public import RoundupStore
public import RoundupStreams

/// Submitting a background job and putting it on the job stream, in one place for every caller (the API's sync and
/// list jobs, `roundupctl reconcile`): a job the stream did not take is ended at once (`could not be queued`), so its
/// account is not blocked behind a job no worker will ever run, and the caller is told.
public struct JobQueue: Sendable {
    /// The job was stored but Redis did not take its entry; it has been ended, nothing else changed: submit again.
    public struct NotQueued: Error, Sendable, CustomStringConvertible {
        public var jobID: String
        public var reason: String
        public var description: String { "job \(jobID) could not be queued: \(reason)" }
    }

    let store: any JobRepository
    let redis: RedisClient
    let keys: RedisKeys
    /// When a job without a heartbeat reads as stale (`ROUNDUP_JOB_STALE_SECONDS`).
    public let staleAfter: TimeInterval

    public init(store: any JobRepository, redis: RedisClient, keys: RedisKeys, staleAfter: TimeInterval) {
        self.store = store
        self.redis = redis
        self.keys = keys
        self.staleAfter = staleAfter
    }

    /// Submits a job (`JobRepository.submitJob`: the account's lease, the idempotency key) and queues one created now.
    /// `trace`: the submitting request's trace context (an app's `traceparent`), which the job's entry carries.
    public func submit(
        accountID: String, kind: JobKind, deviceID: String? = nil, idempotencyKey: String? = nil, payload: JSONValue, total: Int,
        trace: TraceHeaders? = nil
    ) async throws -> JobSubmission {
        let submission = try await store.submitJob(
            accountID: accountID, kind: kind, deviceID: deviceID, idempotencyKey: idempotencyKey, payload: payload, total: total,
            staleAfter: staleAfter)
        if case .created(let job) = submission { try await enqueue(job, trace: trace) }
        return submission
    }

    /// Appends a stored job's entry to the job stream; when Redis does not take it, the job is ended and `NotQueued` thrown.
    public func enqueue(_ job: SyncJob, trace: TraceHeaders? = nil) async throws {
        do {
            _ = try await redis.send(
                .streamAppend(keys.jobStream, fields: SyncJobMessage(jobID: job.id, account: job.accountID, kind: job.kind, trace: trace).fields),
                timeout: .seconds(2))
        } catch {
            try? await store.finishJob(jobID: job.id, status: .error, error: "could not be queued")
            throw NotQueued(jobID: job.id, reason: "\(error)")
        }
    }
}

/// The Trello writes (POST, PUT and DELETE requests; reads are not counted) a sync's items may make, as `SyncEngine`
/// writes them: an upper bound from the items alone, the cards unread. The API refuses a sync over
/// `ROUNDUP_SYNC_MAX_TRELLO_WRITES` with it, so one request cannot hold a worker's slot for an hour (39,390 writes fitted
/// in a 1 MiB body: 390 creates of 100 links each), and it bounds each item too (a create with N check items or links
/// is about 1 + N writes).
///
/// Per item: a `delete` (archive or delete) or `complete` is one write. A `create` is one (the card, with its title,
/// notes, dates, completion and labels), plus the fields it writes after: one `PUT` for location and due reminder, one
/// for the priority, and each checklist, check item and link one. An `update` is one `PUT` for the card's attributes
/// (title, notes, dates, completion, location, due reminder, labels), one for the priority, each checklist and check
/// item it names one (a rename, a tick, an add or a delete: the engine deletes only what says `deleted`), each link
/// added or deleted one, and a new `url` two (the old first link deleted, the new one added).
public enum SyncWrites {
    /// Fields a create sends with the card itself (`SyncFields.cardAttribute`, and the labels).
    static let createFields: Set<SyncField> = [.title, .notes, .dueDate, .startDate, .completed, .labels]

    /// At most the Trello writes of `items`.
    public static func estimate(_ items: [SyncItem]) -> Int { items.reduce(0) { $0 + estimate($1) } }

    /// At most the Trello writes of one item.
    public static func estimate(_ item: SyncItem) -> Int {
        switch item.op {
        case .delete, .complete: return 1
        case .move:
            let changed = Set(item.changedFields)
            return 1 + fieldWrites(item.fields.filter { changed.contains($0.key) }, create: false)
        case .create: return 1 + fieldWrites(item.fields, create: true)
        case .update:
            let changed = Set(item.changedFields)
            return fieldWrites(item.fields.filter { changed.contains($0.key) }, create: false)
        }
    }

    private static func fieldWrites(_ fields: [String: JSONValue], create: Bool) -> Int {
        var writes = 0
        var cardPut = false
        var priority = false
        for (name, value) in fields {
            guard let field = SyncField(rawValue: name) else { continue }
            // A create writes no empty extra (`SyncEngine.createCard`); an update writes what it names, null included.
            if create, value == .null || value == .array([]) { continue }
            switch field {
            case .title, .notes, .dueDate, .startDate, .completed, .location, .dueReminderMinutes, .labels:
                // One `PUT /cards/{id}` for them all; a create sends most with the card.
                if !(create && createFields.contains(field)) { cardPut = true }
            case .priority, .priorityLevel:
                priority = true
            case .checklists:
                for checklist in value.arrayValue ?? [] {
                    writes += 1
                    if checklist["deleted"]?.boolValue == true { continue }
                    writes += checklist["items"]?.arrayValue?.count ?? 0
                }
            case .attachments:
                writes += (value.arrayValue ?? []).count { $0["deleted"]?.boolValue == true || $0["id"]?.stringValue == nil }
            case .url:
                writes += create || value == .null ? 1 : 2
            case .trelloURL:
                continue
            }
        }
        return writes + (cardPut ? 1 : 0) + (priority ? 1 : 0)
    }
}
