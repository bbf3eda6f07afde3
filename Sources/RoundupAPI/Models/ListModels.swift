public import Hummingbird
public import RoundupCore
import RoundupStore

// The bodies of /dailyroundup/lists (docs/openapi.yaml: SyncList, SyncListCreate).

/// A paired Trello list.
public struct SyncList: ResponseCodable, Sendable, Equatable {
    public var syncListID: String
    public var name: String
    public var trelloListID: String
    public var trelloBoardID: String
    @Nullable public var createdAt: String?
    /// When the list was last compared with Trello successfully (null until the first run).
    @Nullable public var lastReconciledAt: String?
    /// Why the last run failed, if it did.
    @Nullable public var lastReconcileError: String?
    /// How the list syncs (`SyncSettings.json`): every key, defaults filled in.
    public var settings: JSONValue
    /// `GET /dailyroundup/lists/{id}` only: the board's labels (`{id, name, color}`) and its Priority field's options
    /// (`{id, text, level}`, the level on EventKit's scale as the server maps it), for the apps to offer.
    public var labels: [JSONValue]? = nil
    public var priorityOptions: [JSONValue]? = nil
    /// Why `labels` is missing (Trello could not be asked); the options are then the ones last stored.
    public var vocabularyError: String? = nil
    /// The Trello list is archived: the sync is paused (no reminder deleted, no change written to Trello) until it is
    /// restored there. `archived_at`: when the server found it so.
    public var archived: Bool
    @Nullable public var archivedAt: String?

    enum CodingKeys: String, CodingKey {
        case syncListID = "sync_list_id"
        case name
        case trelloListID = "trello_list_id"
        case trelloBoardID = "trello_board_id"
        case createdAt = "created_at"
        case lastReconciledAt = "last_reconciled_at"
        case lastReconcileError = "last_reconcile_error"
        case settings
        case labels
        case priorityOptions = "priority_options"
        case vocabularyError = "vocabulary_error"
        case archived
        case archivedAt = "archived_at"
    }

    init(_ list: SyncListRecord) {
        syncListID = list.id
        name = list.name
        trelloListID = list.trelloListID
        trelloBoardID = list.trelloBoardID
        createdAt = list.createdAt
        lastReconciledAt = list.lastReconciledAt
        lastReconcileError = list.lastReconcileError
        settings = list.settings.json
        archived = list.archived
        archivedAt = list.archivedAt
    }
}

/// `GET /dailyroundup/lists`.
public struct SyncListPage: ResponseCodable, Sendable, Equatable {
    public var lists: [SyncList]
}

/// `POST /dailyroundup/lists`: the Trello list to pair.
public struct SyncListCreate: Sendable, Equatable {
    public var name: String
    public var trelloBoardID: String
    public var trelloListID: String
    /// The settings asked for (over the defaults); `me` among the filter's members is still to be resolved.
    public var settings: SyncSettings

    enum CodingKeys: String, CodingKey, CaseIterable {
        case name
        case trelloBoardID = "trello_board_id"
        case trelloListID = "trello_list_id"
        case settings
    }

    init(_ body: JSONBody) throws {
        try body.allowOnly(Set(CodingKeys.allCases.map(\.rawValue)))
        // Display text: room for characters of several code points (emoji sequences, combining accents) in every place.
        name = try body.requiredString(CodingKeys.name.rawValue, maxLength: 200, maxBytes: 2_048)
        trelloBoardID = try body.requiredString(CodingKeys.trelloBoardID.rawValue, maxLength: 64)
        trelloListID = try body.requiredString(CodingKeys.trelloListID.rawValue, maxLength: 64)
        try Self.validTrelloID(trelloBoardID, field: CodingKeys.trelloBoardID.rawValue)
        try Self.validTrelloID(trelloListID, field: CodingKeys.trelloListID.rawValue)
        settings = try body.object[CodingKeys.settings.rawValue].map { try SyncListSettingsBody.parse($0, over: .default) } ?? .default
    }

    static func validTrelloID(_ id: String, field: String) throws {
        guard id.count <= 64, id.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }) else {
            throw APIError.unprocessable("\(field) must be a Trello id (letters and digits)")
        }
    }
}

/// `PUT /dailyroundup/lists/{id}`: `{"settings": {…}}`, each key left out keeping its value.
enum SyncListSettingsBody {
    static func read(_ body: JSONBody, over current: SyncSettings) throws -> SyncSettings {
        try body.allowOnly(["settings"])
        guard let value = body.object["settings"] else { throw APIError.unprocessable("settings is required") }
        return try parse(value, over: current)
    }

    static func parse(_ value: JSONValue, over base: SyncSettings) throws -> SyncSettings {
        do {
            return try SyncSettings(json: value, over: base)
        } catch {
            throw APIError.unprocessable(error.description)
        }
    }
}

/// One card of `GET /dailyroundup/lists/{id}/cards`: what the server maps and knows of it.
public struct ListCard: Codable, Sendable, Equatable {
    public var trelloCardID: String
    /// The reminder an app made of the card; null while its `create` waits for the apps.
    @Nullable public var reminderID: String?
    /// Every field as a `create` change carries them (the list's settings apply, an all-day date is its day); null
    /// when the server has not read the card since it began keeping its values (the list's next reconciliation does).
    @Nullable public var fields: [String: JSONValue]?
    /// When the server last wrote what it knows of the card.
    public var updatedAt: String

    enum CodingKeys: String, CodingKey {
        case trelloCardID = "trello_card_id"
        case reminderID = "reminder_id"
        case fields
        case updatedAt = "updated_at"
    }

    init(_ record: ListCardRecord, settings: SyncSettings) {
        trelloCardID = record.cardID
        reminderID = record.reminderID
        fields = FieldValues.card(record.values, stamps: record.stamps, settings: settings)
        updatedAt = record.updatedAt
    }
}

/// `GET /dailyroundup/lists/{id}/cards`: a page of the list's cards, and the cursor of the next (null: the last page).
public struct ListCardPage: ResponseCodable, Sendable, Equatable {
    public var syncListID: String
    public var cards: [ListCard]
    @Nullable public var nextCursor: String?

    enum CodingKeys: String, CodingKey {
        case syncListID = "sync_list_id"
        case cards
        case nextCursor = "next_cursor"
    }
}
