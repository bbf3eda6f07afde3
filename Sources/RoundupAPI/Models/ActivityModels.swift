public import Hummingbird
public import RoundupCore
import RoundupStore

// The body of GET /dailyroundup/activity.

/// One decision the server made about an item (`ActivityKind`).
public struct ActivityEntry: ResponseCodable, Sendable, Equatable {
    public var id: Int64
    public var kind: ActivityKind
    @Nullable public var syncListID: String?
    @Nullable public var trelloCardID: String?
    @Nullable public var reminderID: String?
    /// Where the change was made; null for the user's resolution.
    @Nullable public var side: SyncSide?
    @Nullable public var field: String?
    /// The value before (null when not known) and after; for a conflict, the value set aside and the one that stands.
    @Nullable public var oldValue: JSONValue?
    @Nullable public var newValue: JSONValue?
    @Nullable public var rule: ConflictRule?
    @Nullable public var kept: SyncSide?
    @Nullable public var message: String?
    @Nullable public var jobID: String?
    @Nullable public var trelloActionID: String?
    public var createdAt: String

    enum CodingKeys: String, CodingKey {
        case id, kind, side, field, rule, kept, message
        case syncListID = "sync_list_id"
        case trelloCardID = "trello_card_id"
        case reminderID = "reminder_id"
        case oldValue = "old_value"
        case newValue = "new_value"
        case jobID = "job_id"
        case trelloActionID = "trello_action_id"
        case createdAt = "created_at"
    }

    init(_ r: ActivityRecord) {
        id = r.id
        kind = r.kind
        syncListID = r.syncListID
        trelloCardID = r.cardID
        reminderID = r.reminderID
        side = r.side
        field = r.field
        oldValue = r.oldValueJSON.flatMap { try? JSONParser.parse(Array($0.utf8)) }
        newValue = r.newValueJSON.flatMap { try? JSONParser.parse(Array($0.utf8)) }
        rule = r.rule
        kept = r.kept
        message = r.message
        jobID = r.jobID
        trelloActionID = r.trelloActionID
        createdAt = r.createdAt
    }
}

/// `GET /dailyroundup/activity`: newest first; `next_before_id` asks for the page after this one.
public struct ActivityPage: ResponseCodable, Sendable, Equatable {
    public var activity: [ActivityEntry]
    public var hasMore: Bool
    @Nullable public var nextBeforeID: Int64?

    enum CodingKeys: String, CodingKey {
        case activity
        case hasMore = "has_more"
        case nextBeforeID = "next_before_id"
    }
}
