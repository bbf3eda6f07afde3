public import Hummingbird
public import RoundupCore
import RoundupStore

// The bodies of /dailyroundup/changes (docs/openapi.yaml: Change, AckBody).

/// A pending change. `GET /dailyroundup/changes` writes its page by splicing the stored JSON columns
/// (`ChangeRoutes.page`); this type is the page's shape for readers of it (and the tests that check the splice).
public struct Change: Codable, Sendable, Equatable {
    public var id: Int64
    public var changeType: ChangeType
    public var syncListID: String
    public var trelloCardID: String
    @Nullable public var reminderID: String?
    public var changedFields: [String]
    public var fields: [String: JSONValue]
    public var createdAt: String

    enum CodingKeys: String, CodingKey {
        case id
        case changeType = "change_type"
        case syncListID = "sync_list_id"
        case trelloCardID = "trello_card_id"
        case reminderID = "reminder_id"
        case changedFields = "changed_fields"
        case fields
        case createdAt = "created_at"
    }
}

/// `GET /dailyroundup/changes`.
public struct ChangePage: Codable, Sendable, Equatable {
    public var changes: [Change]
    public var hasMore: Bool
    public var serverTime: String
    /// With `device_id`: until when the page's changes are the device's (`ChangeClaim`).
    public var claimedUntil: String?

    enum CodingKeys: String, CodingKey {
        case changes
        case hasMore = "has_more"
        case serverTime = "server_time"
        case claimedUntil = "claimed_until"
    }
}

/// `POST /dailyroundup/changes/release`: a device gives back the changes it holds (all, or those of `ids`), so another
/// device of the account gets them at its next pull instead of after the hold lapses.
public struct ChangeReleaseBody: Sendable, Equatable {
    public var deviceID: String
    public var ids: [Int64]?

    enum CodingKeys: String, CodingKey, CaseIterable {
        case deviceID = "device_id"
        case ids
    }

    init(_ body: JSONBody) throws {
        try body.allowOnly(Set(CodingKeys.allCases.map(\.rawValue)))
        deviceID = try body.requiredString(CodingKeys.deviceID.rawValue, maxLength: 200)
        if let list = body.object[CodingKeys.ids.rawValue], list != .null {
            guard case .array(let items) = list else { throw APIError.badRequest("ids must be an array of change ids") }
            guard items.count <= ChangeAckBatch.maxAcks else { throw APIError.unprocessable("at most \(ChangeAckBatch.maxAcks) ids per request") }
            ids = try items.enumerated().map { try JSONBody.integer($1, name: "ids[\($0)]") }
        }
    }
}

/// The answer to `POST /dailyroundup/changes/release`.
public struct ReleasedChanges: ResponseCodable, Sendable, Equatable {
    /// How many changes the device held and gave back.
    public var released: Int
}

/// `POST /dailyroundup/changes/{id}/ack` (the body is optional).
public struct ChangeAckBody: Codable, Sendable, Equatable {
    /// The reminder the app made for a create.
    public var reminderID: String?

    enum CodingKeys: String, CodingKey, CaseIterable {
        case reminderID = "reminder_id"
    }

    /// The most characters of a reminder id in an ack (and bytes: `SyncChange.reminderIDMaxBytes`).
    static let reminderIDMaxLength = 500

    init(_ body: JSONBody) throws {
        try body.allowOnly(Set(CodingKeys.allCases.map(\.rawValue)))
        reminderID = try body.string(
            CodingKeys.reminderID.rawValue, required: false, maxLength: Self.reminderIDMaxLength, maxBytes: SyncChange.reminderIDMaxBytes)
    }
}

/// `POST /dailyroundup/changes/ack`: `acks` (ids with the reminders made for creates), or the older bare `ids`.
public struct ChangeAckBatch: Codable, Sendable, Equatable {
    public struct Item: Codable, Sendable, Equatable {
        public var id: Int64
        public var reminderID: String?

        enum CodingKeys: String, CodingKey {
            case id
            case reminderID = "reminder_id"
        }
    }

    public var acks: [Item]?
    public var ids: [Int64]?

    enum CodingKeys: String, CodingKey, CaseIterable {
        case acks, ids
    }

    static let maxAcks = 500

    init(_ body: JSONBody) throws {
        try body.allowOnly(Set(CodingKeys.allCases.map(\.rawValue)))
        if let list = body.object[CodingKeys.acks.rawValue] {
            guard case .array(let items) = list else { throw APIError.badRequest("acks must be an array") }
            acks = try items.enumerated().map { index, item in
                guard case .object(let object) = item, let idValue = object["id"] else {
                    throw APIError.badRequest("acks[\(index)] must be an object with an id")
                }
                let id = try JSONBody.integer(idValue, name: "acks[\(index)].id")
                var reminder: String?
                if let value = object["reminder_id"], value != .null {
                    guard case .string(let text) = value, !text.isEmpty else {
                        throw APIError.badRequest("acks[\(index)].reminder_id must be a string")
                    }
                    // The bounds of `ChangeAckBody`'s (this one is not trimmed: it was taken as sent before).
                    try JSONBody.checkLength(
                        text, name: "acks[\(index)].reminder_id", maxLength: ChangeAckBody.reminderIDMaxLength,
                        maxBytes: SyncChange.reminderIDMaxBytes)
                    reminder = text
                }
                return Item(id: id, reminderID: reminder)
            }
        } else if let list = body.object[CodingKeys.ids.rawValue] {
            guard case .array(let items) = list else { throw APIError.badRequest("ids must be an array") }
            ids = try items.enumerated().map { try JSONBody.integer($1, name: "ids[\($0)]") }
        } else {
            throw APIError.unprocessable("send {\"acks\": [{\"id\", \"reminder_id\"}]} or {\"ids\": [...]}")
        }
        let count = acknowledgements.count
        guard count > 0 else { throw APIError.unprocessable("nothing to ack") }
        guard count <= Self.maxAcks else { throw APIError.unprocessable("at most \(Self.maxAcks) acks per request") }
    }

    var acknowledgements: [ChangeAck] {
        acks.map { $0.map { ChangeAck(id: $0.id, reminderID: $0.reminderID) } } ?? (ids ?? []).map { ChangeAck(id: $0) }
    }
}

/// The changes acknowledged.
public struct AckedChanges: ResponseCodable, Sendable, Equatable {
    public var acked: [Int64]
}
