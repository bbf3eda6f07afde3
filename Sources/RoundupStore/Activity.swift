public import Foundation
public import RoundupCore

/// One decision about an item, to be written in the transaction that acts on it (`activity`).
public struct NewActivity: Sendable, Equatable {
    public var syncListID: String?
    public var cardID: String?
    public var reminderID: String?
    public var kind: ActivityKind
    /// Where the change was made.
    public var side: SyncSide?
    public var field: String?
    /// The value before (nil: not known, as for a card read whole), and after.
    public var oldValue: JSONValue?
    public var newValue: JSONValue?
    public var rule: ConflictRule?
    /// Whose value stands after a conflict.
    public var kept: SyncSide?
    public var message: String?
    public var jobID: String?
    public var trelloActionID: String?

    public init(
        kind: ActivityKind, syncListID: String?, cardID: String?, reminderID: String? = nil, side: SyncSide? = nil, field: String? = nil,
        oldValue: JSONValue? = nil, newValue: JSONValue? = nil, rule: ConflictRule? = nil, kept: SyncSide? = nil, message: String? = nil,
        jobID: String? = nil, trelloActionID: String? = nil
    ) {
        self.kind = kind
        self.syncListID = syncListID
        self.cardID = cardID
        self.reminderID = reminderID
        self.side = side
        self.field = field
        self.oldValue = oldValue
        self.newValue = newValue
        self.rule = rule
        self.kept = kept
        self.message = message
        self.jobID = jobID
        self.trelloActionID = trelloActionID
    }

    /// The values as stored: canonical JSON text, or NULL.
    package var oldValueJSON: String? { oldValue?.canonicalJSON }
    package var newValueJSON: String? { newValue?.canonicalJSON }

    /// The columns both stores insert, in this order.
    package static let columns =
        "account_id, sync_list_id, trello_card_id, reminder_id, kind, side, field, old_value, new_value, rule, kept, message, job_id, trello_action_id, created_at"
}

/// An activity row as stored. Values stay canonical JSON text, so a page carries them without re-encoding.
public struct ActivityRecord: Sendable, Equatable {
    public var id: Int64
    public var accountID: String
    public var syncListID: String?
    public var cardID: String?
    public var reminderID: String?
    public var kind: ActivityKind
    public var side: SyncSide?
    public var field: String?
    public var oldValueJSON: String?
    public var newValueJSON: String?
    public var rule: ConflictRule?
    public var kept: SyncSide?
    public var message: String?
    public var jobID: String?
    public var trelloActionID: String?
    public var createdAt: String
}

/// A card ↔ reminder mapping as stored (`sync_tasks`), for the export.
public struct MappingRecord: Sendable, Equatable {
    public var id: Int64
    public var syncListID: String
    /// The Trello card, or `pending:<reminder>` while a create is in flight.
    public var cardID: String
    public var reminderID: String?
    /// The card left the list (deleted, archived, moved out).
    public var deleted: Bool
    public var lastSyncedAt: String?
    public var createdAt: String
    public var updatedAt: String
}

/// Which activity to read: newest first, before `beforeID` when given. A reminder's activity includes its card's.
public struct ActivityQuery: Sendable, Equatable {
    public var syncListID: String?
    public var reminderID: String?
    public var cardID: String?
    /// The rows a Trello action (a webhook event) made.
    public var trelloActionID: String?
    public var beforeID: Int64?
    public var limit: Int
    public init(
        syncListID: String? = nil, reminderID: String? = nil, cardID: String? = nil, trelloActionID: String? = nil, beforeID: Int64? = nil,
        limit: Int = 50
    ) {
        self.syncListID = syncListID
        self.reminderID = reminderID
        self.cardID = cardID
        self.trelloActionID = trelloActionID
        self.beforeID = beforeID
        self.limit = limit
    }
}

/// The activity history: read by the apps, written by every rule that decides about an item, pruned by age.
public protocol ActivityRepository: Sendable {
    func activity(accountID: String, _ query: ActivityQuery) async throws -> [ActivityRecord]
    /// Deletes rows created before `cutoff`, oldest first, at most `batch` at a time; returns how many went.
    func pruneActivity(before cutoff: Date, batch: Int) async throws -> Int
    /// Writes rows on their own, for a decision that changes nothing else.
    func recordActivity(accountID: String, _ rows: [NewActivity]) async throws
    /// The account's card ↔ reminder mappings after `afterID`, in id order (the export).
    func mappings(accountID: String, afterID: Int64, limit: Int) async throws -> [MappingRecord]
}
