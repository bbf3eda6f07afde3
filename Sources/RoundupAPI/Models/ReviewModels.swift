import Hummingbird
package import RoundupCore
import RoundupStore

// The bodies of /dailyroundup/conflicts and /dailyroundup/duplicates.

/// A field both sides changed, with both values.
package struct Conflict: ResponseCodable, Sendable, Equatable {
    package var id: Int64
    @Nullable package var syncListID: String?
    @Nullable package var trelloCardID: String?
    @Nullable package var reminderID: String?
    package var field: String
    /// The value as JSON (null when none was recorded).
    package var trelloValue: JSONValue
    package var remindersValue: JSONValue
    package var status: ConflictStatus
    package var createdAt: String
    @Nullable package var resolution: ConflictChoice?
    @Nullable package var resolvedAt: String?

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
package struct ConflictPage: ResponseCodable, Sendable, Equatable {
    package var conflicts: [Conflict]
}

/// `POST /dailyroundup/conflicts/{id}/resolve`.
package struct ConflictResolution: Codable, Sendable, Equatable {
    package var choice: ConflictChoice
    /// The value the user typed; required when `choice` is `value`.
    package var value: JSONValue?

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
package struct Duplicate: ResponseCodable, Sendable, Equatable {
    package var id: Int64
    package var syncListID: String
    @Nullable package var reminderID: String?
    package var trelloCardID: String
    package var title: String
    @Nullable package var dueDate: String?
    package var status: DuplicateStatus
    package var createdAt: String

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
package struct DuplicatePage: ResponseCodable, Sendable, Equatable {
    package var duplicates: [Duplicate]
}

/// `POST /dailyroundup/duplicates/{id}/resolve`.
package struct DuplicateResolution: Codable, Sendable, Equatable {
    package var action: DuplicateAction

    enum CodingKeys: String, CodingKey, CaseIterable {
        case action
    }

    init(_ body: JSONBody) throws {
        try body.allowOnly(Set(CodingKeys.allCases.map(\.rawValue)))
        action = try body.requiredOneOf(CodingKeys.action.rawValue, DuplicateAction.self)
    }
}
