public import Foundation
public import RoundupCore

/// One edit an app posted in `POST /dailyroundup/sync`, validated.
public struct SyncItem: Sendable, Equatable {
    public var op: SyncOp
    public var syncListID: String
    public var reminderID: String
    public var trelloCardID: String?
    /// Values in the form the apps see them in changes (`due_date` as ISO-8601 with milliseconds, `priority` lower case).
    public var fields: [String: JSONValue]
    public var changedFields: [String]
    public var modifiedAt: Date

    public init(
        op: SyncOp, syncListID: String, reminderID: String, trelloCardID: String?, fields: [String: JSONValue], changedFields: [String],
        modifiedAt: Date
    ) {
        self.op = op
        self.syncListID = syncListID
        self.reminderID = reminderID
        self.trelloCardID = trelloCardID
        self.fields = fields
        self.changedFields = changedFields
        self.modifiedAt = modifiedAt
    }

    public var json: JSONValue {
        .object([
            "op": .string(op.rawValue), "sync_list_id": .string(syncListID), "reminder_id": .string(reminderID),
            "trello_card_id": trelloCardID.map(JSONValue.string) ?? .null, "fields": .object(fields),
            "changed_fields": .array(changedFields.map(JSONValue.string)), "modified_at": .string(Timestamp.string(modifiedAt)),
        ])
    }

    public init?(json: JSONValue) {
        guard let op = json["op"]?.stringValue.flatMap(SyncOp.init(rawValue:)), let list = json["sync_list_id"]?.stringValue,
            let reminder = json["reminder_id"]?.stringValue,
            let modified = json["modified_at"]?.stringValue.flatMap(Timestamp.date)
        else { return nil }
        self.init(
            op: op, syncListID: list, reminderID: reminder, trelloCardID: json["trello_card_id"]?.stringValue,
            fields: json["fields"]?.objectValue ?? [:], changedFields: json["changed_fields"]?.arrayValue?.compactMap(\.stringValue) ?? [],
            modifiedAt: modified)
    }
}

/// What became of one item of a job.
public struct SyncItemResult: Sendable, Equatable {
    public var reminderID: String?
    public var op: JobItemOp
    public var status: ItemStatus
    public var trelloCardID: String?
    public var error: String?
    public var conflictIDs: [Int64]
    public var duplicateID: Int64?
    /// A reconciliation's figures (changes emitted by type, cards seen, webhooks registered again).
    public var summary: [String: JSONValue]?
    /// Fields of the edit the list's settings keep from Trello (the rest was written).
    public var skippedFields: [String] = []
    /// Why the item was skipped, for `ItemStatus.skipped`.
    public var reason: String?
    /// What the card holds that the app did not send, or sent in another form (its `trello_url`, label ids, the ids
    /// Trello gave new check items and links, what a move to another board dropped): the device that sent the item
    /// learns them here, not from a change.
    public var fields: [String: JSONValue]?

    public init(
        reminderID: String?, op: JobItemOp, status: ItemStatus, trelloCardID: String? = nil, error: String? = nil, conflictIDs: [Int64] = [],
        duplicateID: Int64? = nil
    ) {
        self.reminderID = reminderID
        self.op = op
        self.status = status
        self.trelloCardID = trelloCardID
        self.error = error
        self.conflictIDs = conflictIDs
        self.duplicateID = duplicateID
    }

    public var json: JSONValue {
        var object: [String: JSONValue] = [
            "reminder_id": reminderID.map(JSONValue.string) ?? .null, "op": .string(op.rawValue), "status": .string(status.rawValue),
            "trello_card_id": trelloCardID.map(JSONValue.string) ?? .null, "error": error.map(JSONValue.string) ?? .null,
        ]
        if !conflictIDs.isEmpty { object["conflict_ids"] = .array(conflictIDs.map { .number(Double($0)) }) }
        if let duplicateID { object["duplicate_id"] = .number(Double(duplicateID)) }
        if let summary { object["summary"] = .object(summary) }
        if !skippedFields.isEmpty { object["skipped_fields"] = .array(skippedFields.map(JSONValue.string)) }
        if let reason { object["reason"] = .string(reason) }
        if let fields { object["fields"] = .object(fields) }
        return .object(object)
    }

    /// The history row of an item that wrote nothing to Trello (an error, a skip) or left some fields behind; nil for
    /// one whose write the store recorded with its own rows.
    package func activity(item: SyncItem?, jobID: String) -> NewActivity? {
        let kind: ActivityKind
        let message: String?
        switch status {
        case .error:
            kind = .error
            message = error
        case .skipped:
            kind = .skipped
            message = reason
        case .duplicate:
            kind = .skipped
            message = "a card with the same title is in the list: possible duplicate \(duplicateID.map(String.init) ?? "") waits for the user"
        case .ok, .conflict:
            guard !skippedFields.isEmpty else { return nil }
            kind = .skipped
            message = "the list's settings keep \(skippedFields.joined(separator: ", ")) from Trello"
        }
        var row = NewActivity(
            kind: kind, syncListID: item?.syncListID, cardID: trelloCardID ?? item?.trelloCardID, reminderID: reminderID, side: .reminders,
            message: message, jobID: jobID)
        if skippedFields.count == 1 { row.field = skippedFields[0] }
        if kind == .error || status == .skipped, let item, item.op == .update || item.op == .complete {
            if item.changedFields.count == 1, let field = item.changedFields.first {
                row.field = field
                row.newValue = item.op == .complete ? .bool(true) : item.fields[field]
            }
        }
        return row
    }

    public init?(json: JSONValue) {
        guard let op = json["op"]?.stringValue.flatMap(JobItemOp.init(rawValue:)),
            let status = json["status"]?.stringValue.flatMap(ItemStatus.init(rawValue:))
        else { return nil }
        let conflicts = (json["conflict_ids"]?.arrayValue ?? []).compactMap { value -> Int64? in
            if case .number(let n) = value { return Int64(n) }
            return nil
        }
        var duplicate: Int64?
        if case .number(let n)? = json["duplicate_id"] { duplicate = Int64(n) }
        self.init(
            reminderID: json["reminder_id"]?.stringValue, op: op, status: status, trelloCardID: json["trello_card_id"]?.stringValue,
            error: json["error"]?.stringValue, conflictIDs: conflicts, duplicateID: duplicate)
        self.summary = json["summary"]?.objectValue
        self.skippedFields = json["skipped_fields"]?.arrayValue?.compactMap(\.stringValue) ?? []
        self.reason = json["reason"]?.stringValue
        self.fields = json["fields"]?.objectValue
    }

    /// An item the list's settings keep from Trello whole.
    public static func skipped(_ item: SyncItem, cardID: String? = nil, reason: String) -> Self {
        var result = Self(reminderID: item.reminderID, op: JobItemOp(item.op), status: .skipped, trelloCardID: cardID)
        result.reason = reason
        return result
    }
}

/// A background job (`background_jobs`): a sync of the apps' edits, or an import of a Trello list.
public struct SyncJob: Sendable, Equatable {
    public var id: String
    public var accountID: String
    public var kind: JobKind
    public var status: JobStatus
    public var deviceID: String?
    public var processed: Int
    public var total: Int
    /// For a sync: the items. For an import: `[{"sync_list_id": …}]`.
    public var payload: JSONValue
    public var results: [SyncItemResult]
    public var error: String?
    public var createdAt: String
    public var updatedAt: String

    /// Running, but the heartbeat has not moved for `staleAfter` seconds: its worker is gone; or still queued long
    /// after it was submitted (`JobHeartbeat.queuedLimit`): its stream entry is lost.
    public func isStale(now: Date = Date(), staleAfter: TimeInterval) -> Bool {
        JobHeartbeat.isStale(status: status, updatedAt: updatedAt, now: now, after: staleAfter)
    }

    /// A sync's items as the API accepted them. Throws when the stored payload is not that array (a row edited by hand,
    /// a value a store could not hold): such a job fails loudly, it never reads as "no items".
    public func syncItems() throws -> [SyncItem] {
        guard case .array(let values) = payload else { throw UnreadablePayload(jobID: id, detail: "the stored payload is not an array of items") }
        var items: [SyncItem] = []
        items.reserveCapacity(values.count)
        for (index, value) in values.enumerated() {
            guard let item = SyncItem(json: value) else {
                throw UnreadablePayload(jobID: id, detail: "item \(index) of the stored payload cannot be read")
            }
            items.append(item)
        }
        guard items.count == total else {
            throw UnreadablePayload(jobID: id, detail: "the stored payload holds \(items.count) items, the job was accepted with \(total)")
        }
        return items
    }
}

extension SyncJob {
    /// The stored item at `index`, nil when there is none or it cannot be read: for the history of one result. Running a
    /// job reads them all with `syncItems()`, which fails loudly instead.
    public func storedItem(at index: Int) -> SyncItem? {
        guard let values = payload.arrayValue, values.indices.contains(index) else { return nil }
        return SyncItem(json: values[index])
    }
}

/// A job whose stored payload cannot be read as what the API accepted.
public struct UnreadablePayload: Error, CustomStringConvertible, Equatable {
    public var jobID: String
    public var detail: String
    public var description: String { "the job's stored items cannot be read: \(detail)" }
}

/// A background job as operators see it.
public struct JobRecord: Sendable, Equatable {
    public var id: String
    public var accountID: String
    public var kind: JobKind
    public var status: JobStatus
    public var processed: Int
    public var total: Int
    public var error: String?
    public var createdAt: String
    public var updatedAt: String

    /// Running, but its heartbeat (`updated_at`) has not moved for `after` seconds: its worker is gone; or still queued
    /// long after it was submitted (`JobHeartbeat.queuedLimit`): its stream entry is lost.
    public func isStale(now: Date = Date(), after: TimeInterval = 60) -> Bool {
        JobHeartbeat.isStale(status: status, updatedAt: updatedAt, now: now, after: after)
    }
}

/// The staleness rule, once for the worker (`SyncJob`), the store's lease (`JobLease`) and the operators (`JobRecord`):
/// a running job whose heartbeat (`updated_at`) has not moved for longer than `after` seconds has lost its worker.
///
/// A queued job (submitted, not yet started by a worker) has no heartbeat: waiting for a free worker is not staleness,
/// however long the jobs ahead of it take. Only a job still queued `queuedLimit(after)` after it was queued (its
/// `updated_at`: an hour with the default 60 s) reads as stale: its stream entry is lost (Redis lost it, an operator
/// purged it, it was dead-lettered), no worker will ever start it, and its account must not stay blocked behind it.
/// Jobs are bounded (`ROUNDUP_SYNC_MAX_TRELLO_WRITES`), so a live entry waits minutes, not an hour.
public enum JobHeartbeat {
    /// How many times the staleness a job may wait in the queue before it is taken for lost.
    public static let queuedFactor: Double = 60

    /// How long a queued job waits before it reads as lost (`queuedFactor` × `staleAfter`).
    public static func queuedLimit(staleAfter: TimeInterval) -> TimeInterval { staleAfter * queuedFactor }

    public static func isStale(status: JobStatus, updatedAt: String, now: Date, after: TimeInterval) -> Bool {
        let limit: TimeInterval
        switch status {
        case .running: limit = after
        case .queued: limit = queuedLimit(staleAfter: after)
        case .completed, .error: return false
        }
        guard let since = Timestamp.date(updatedAt) else { return false }
        return now.timeIntervalSince(since) > limit
    }
}

extension JobStatus {
    /// Completed or failed: nothing about the job changes any more. A queued or running job has not ended.
    public var hasEnded: Bool { self == .completed || self == .error }
}

public enum JobSubmission: Sendable, Equatable {
    case created(SyncJob)
    /// The same `Idempotency-Key` was used before: that job, untouched.
    case replayed(SyncJob)
    /// Another job of the account holds the lease and is alive.
    case busy(runningJobID: String)
}

/// What a worker gets when it picks up a job.
public enum JobStart: Sendable, Equatable {
    case run(SyncJob)
    /// Finished already, or given up as stale: acknowledge the stream entry and move on.
    case skip(JobSkip)
}

/// Why a worker does not run a job it picked up.
public enum JobSkip: Sendable, Equatable, CustomStringConvertible {
    case noSuchJob
    /// Completed or failed already.
    case ended(JobStatus)
    /// Its heartbeat stopped too long ago: given up now (the app has been told; it never resumes).
    case stale
    /// Another job of the account holds the lease (this one is ended as `lease lost`).
    case leaseHeldByAnother
    /// Its entry looked idle, but the worker running it still beats.
    case runningOn(holder: String)

    public var description: String {
        switch self {
        case .noSuchJob: "no such job"
        case .ended(let status): "already \(status.rawValue)"
        case .stale: JobOutcome.stale.rawValue
        case .leaseHeldByAnother: "another job holds the account's lease"
        case .runningOn(let holder): "running on \(holder)"
        }
    }
}

/// The per-field stamp of a card: the hash of the value last seen on Trello's side and when it was set.
public struct FieldStamp: Sendable, Equatable {
    public var hash: String
    public var time: Double
    public init(hash: String, time: Double) {
        self.hash = hash
        self.time = time
    }
}

/// A card as the store knows it (`sync_tasks`).
public struct SyncTaskRecord: Sendable, Equatable {
    public var syncListID: String
    public var cardID: String
    public var reminderID: String?
    public var deleted: Bool
    public var stamps: [String: FieldStamp]
    public var lastSyncedAt: String?

    /// A create in flight: the card's id is not known yet (`trello_card_id` = `pending:<reminder>`).
    public var isPlaceholder: Bool { cardID.hasPrefix(SyncTaskRecord.placeholderPrefix) }
    public static let placeholderPrefix = "pending:"

    /// When the card left its list (deleted, archived or moved out in Trello, or deleted by the apps), seconds since
    /// 1970; nil while it is in one.
    public var removedAt: Double? {
        guard deleted, let stamp = stamps[FieldStamps.membership], stamp.hash == "removed" else { return nil }
        return stamp.time
    }
}

/// A card the store has in a list, as the list's cards answer it (`ListRepository.listCards`).
public struct ListCardRecord: Sendable, Equatable {
    /// The row's id: the page's cursor.
    public var id: Int64
    public var cardID: String
    public var reminderID: String?
    /// `sync_tasks.field_values` as stored (nil: not yet known).
    public var values: String?
    public var stamps: [String: FieldStamp]
    public var updatedAt: String
}

public struct NewConflict: Sendable, Equatable {
    public var field: String
    public var trelloValue: JSONValue
    public var remindersValue: JSONValue
    public init(field: String, trelloValue: JSONValue, remindersValue: JSONValue) {
        self.field = field
        self.trelloValue = trelloValue
        self.remindersValue = remindersValue
    }
}

/// Everything one outbound write changes in the store, in one transaction.
public struct SyncWrite: Sendable {
    public var accountID: String
    public var syncListID: String
    public var cardID: String
    public var reminderID: String?
    /// Stamps to set (fields written to Trello, and Trello values sent to the apps).
    public var stamps: [String: FieldStamp] = [:]
    /// The card's values of the fields this write knows (what it wrote, read or told): kept for the list's cards
    /// (`ListRepository.listCards`), over the values stored before. Set with their stamps by `stamp(_:_:time:)`.
    public var values: [String: JSONValue] = [:]
    /// Stamps to remove (an all-day date's mark, once the app sets a time: `FieldStamps.dayDateKey`).
    public var forget: Set<String> = []
    /// Marks the card gone from the list (deleted or archived by us).
    public var deleted: Bool = false
    /// The app's values that won over an unacknowledged Trello-side change: that change is rewritten with them,
    /// so an app that already pulled it gets the winning value next.
    public var winning: [String: JSONValue] = [:]
    /// Trello's values the apps must receive (the conflict policy kept Trello's side).
    public var toApps: [String: JSONValue] = [:]
    /// `toApps` are only what the device `sender` learns from its job's result (`SyncItemResult.fields`): their change
    /// is not handed to that device until `until` (milliseconds since 1970; as a declined hold, `ChangeClaim`), while
    /// the account's other devices may take it.
    public var toldOnly: (sender: String, until: Int64)? = nil
    public var conflicts: [NewConflict] = []
    public var jobID: String?
    /// Drop unacknowledged changes of this card (the app deleted its reminder).
    public var dropPending: Bool = false
    /// The decisions behind this write, for the activity history (written in its transaction).
    public var activity: [NewActivity] = []

    public init(accountID: String, syncListID: String, cardID: String, reminderID: String?) {
        self.accountID = accountID
        self.syncListID = syncListID
        self.cardID = cardID
        self.reminderID = reminderID
    }

    /// The stamp that records the value of `field` a sync sent back to the apps after writing what they sent (`toApps`
    /// of our own write: label ids, new check items' ids). An unacknowledged change holding exactly that value is the
    /// apps' own edit, not Trello's: it makes no conflict with their next edit.
    public static func toldStamp(_ field: String) -> String { "_told:" + field }

    /// The card holds `value` in `field` as of `time`: its stamp, and its value for the list's cards.
    public mutating func stamp(_ field: String, _ value: JSONValue, time: Double) {
        stamps[field] = FieldStamp(hash: value.fieldHash, time: time)
        values[field] = value
    }

    public mutating func stamp(_ field: SyncField, _ value: JSONValue, time: Double) { stamp(field.rawValue, value, time: time) }

    /// Sends `values` to the apps as what our own write left on the card (`toldStamp`).
    public mutating func tell(_ values: [String: JSONValue], time: Double) {
        for (field, value) in values {
            toApps[field] = value
            self.values[field] = value
            stamps[Self.toldStamp(field)] = FieldStamp(hash: value.fieldHash, time: time)
        }
    }
}

public struct NewDuplicate: Sendable, Equatable {
    public var syncListID: String
    public var reminderID: String
    public var cardID: String
    public var title: String
    public var dueDate: String?
    public var fields: [String: JSONValue]
    public var jobID: String?
    public init(syncListID: String, reminderID: String, cardID: String, title: String, dueDate: String?, fields: [String: JSONValue], jobID: String?)
    {
        self.syncListID = syncListID
        self.reminderID = reminderID
        self.cardID = cardID
        self.title = title
        self.dueDate = dueDate
        self.fields = fields
        self.jobID = jobID
    }
}

public enum ResolutionTable: String, Sendable {
    case conflicts
    case duplicates = "potential_duplicates"
}

/// A conflict or duplicate as the resolve endpoints need it.
public struct ConflictDetail: Sendable, Equatable {
    public var record: ConflictRecord
    public var resolution: ConflictChoice?
    public var resolvedAt: String?
}

public struct DuplicateDetail: Sendable, Equatable {
    public var record: DuplicateRecord
    public var fields: [String: JSONValue]
    public var resolvedAt: String?
}
