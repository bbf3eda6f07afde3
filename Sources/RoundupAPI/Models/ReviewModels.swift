public import Hummingbird
public import RoundupCore
import RoundupStore

// The bodies of /dailyroundup/conflicts and /dailyroundup/duplicates.

/// A field both sides changed, with both values.
public struct Conflict: ResponseCodable, Sendable, Equatable {
    public var id: Int64
    @Nullable public var syncListID: String?
    @Nullable public var trelloCardID: String?
    @Nullable public var reminderID: String?
    public var field: String
    /// The value as JSON (null when none was recorded).
    public var trelloValue: JSONValue
    public var remindersValue: JSONValue
    public var status: ConflictStatus
    public var createdAt: String
    @Nullable public var resolution: ConflictChoice?
    @Nullable public var resolvedAt: String?

    enum CodingKeys: String, CodingKey {
        case id
        case syncListID = "sync_list_id"
        case trelloCardID = "trello_card_id"
        case reminderID = "reminder_id"
        case field
        case trelloValue = "trello_value"
        case remindersValue = "reminders_value"
        case status
        case createdAt = "created_at"
        case resolution
        case resolvedAt = "resolved_at"
    }

    init(_ conflict: ConflictRecord, resolution: ConflictChoice? = nil, resolvedAt: String? = nil) {
        id = conflict.id
        syncListID = conflict.syncListID
        trelloCardID = conflict.trelloCardID
        reminderID = conflict.reminderID
        field = conflict.field
        trelloValue = conflict.trelloValue.flatMap { try? JSONParser.parse(Array($0.utf8)) } ?? .null
        remindersValue = conflict.remindersValue.flatMap { try? JSONParser.parse(Array($0.utf8)) } ?? .null
        status = conflict.status
        createdAt = conflict.createdAt
        self.resolution = resolution
        self.resolvedAt = resolvedAt
    }
}

/// `GET /dailyroundup/conflicts`.
public struct ConflictPage: ResponseCodable, Sendable, Equatable {
    public var conflicts: [Conflict]
}

/// `POST /dailyroundup/conflicts/{id}/resolve`.
public struct ConflictResolution: Codable, Sendable, Equatable {
    public var choice: ConflictChoice
    /// The value the user typed; required when `choice` is `value`.
    public var value: JSONValue?

    enum CodingKeys: String, CodingKey, CaseIterable {
        case choice, value
    }

    init(_ body: JSONBody) throws {
        try body.allowOnly(Set(CodingKeys.allCases.map(\.rawValue)))
        choice = try body.requiredOneOf(CodingKeys.choice.rawValue, ConflictChoice.self)
        value = body.object[CodingKeys.value.rawValue]
        if choice == .value, value == nil { throw APIError.unprocessable("value is required when choice is value") }
    }
}

/// A card that may be a reminder the app already has.
public struct Duplicate: ResponseCodable, Sendable, Equatable {
    public var id: Int64
    public var syncListID: String
    @Nullable public var reminderID: String?
    public var trelloCardID: String
    public var title: String
    @Nullable public var dueDate: String?
    public var status: DuplicateStatus
    public var createdAt: String

    enum CodingKeys: String, CodingKey {
        case id
        case syncListID = "sync_list_id"
        case reminderID = "reminder_id"
        case trelloCardID = "trello_card_id"
        case title
        case dueDate = "due_date"
        case status
        case createdAt = "created_at"
    }

    init(_ duplicate: DuplicateRecord) {
        id = duplicate.id
        syncListID = duplicate.syncListID
        reminderID = duplicate.reminderID
        trelloCardID = duplicate.trelloCardID
        title = duplicate.title
        dueDate = duplicate.dueDate
        status = duplicate.status
        createdAt = duplicate.createdAt
    }
}

/// `GET /dailyroundup/duplicates`.
public struct DuplicatePage: ResponseCodable, Sendable, Equatable {
    public var duplicates: [Duplicate]
}

/// `POST /dailyroundup/duplicates/{id}/resolve`.
public struct DuplicateResolution: Codable, Sendable, Equatable {
    public var action: DuplicateAction

    enum CodingKeys: String, CodingKey, CaseIterable {
        case action
    }

    init(_ body: JSONBody) throws {
        try body.allowOnly(Set(CodingKeys.allCases.map(\.rawValue)))
        action = try body.requiredOneOf(CodingKeys.action.rawValue, DuplicateAction.self)
    }
}
