public import Foundation
public import RoundupCore

/// An account as the store keeps it: its Trello credentials (as the worker needs them to read cards) and its
/// webhooks' secret and callback token.
public struct AccountRecord: Sendable, Equatable {
    public var id: String
    public var trelloAPIKey: String?
    public var trelloToken: String?
    public var trelloWebhookSecret: String?
    /// The token of the account's webhook callback URL (`WebhookCallback`).
    public var webhookToken: String? = nil
}

public struct SyncListRecord: Sendable, Equatable, Hashable {
    public var id: String
    public var accountID: String
    public var name: String
    public var trelloBoardID: String
    public var trelloListID: String
    public var listWebhookID: String? = nil
    public var boardWebhookID: String? = nil
    public var createdAt: String? = nil
    public var lastReconciledAt: String? = nil
    public var lastReconcileError: String? = nil
    /// How the list syncs (`sync_lists.settings`, canonical JSON; NULL is the defaults).
    public var settings: SyncSettings = .default
    /// The Trello list's name as last read (at pairing, then by reconciliation); a new one there renames the list.
    /// Nil for a list paired before it was kept (the next reconciliation reads it, renaming nothing).
    public var trelloListName: String? = nil
    /// When the Trello list was found archived: the pairing is paused (no job runs against it, nothing is deleted)
    /// until it is restored, which reconciles it.
    public var archivedAt: String? = nil

    /// Whether the pairing is paused because the Trello list is archived.
    public var archived: Bool { archivedAt != nil }

    package init(
        id: String, accountID: String, name: String, trelloBoardID: String, trelloListID: String, listWebhookID: String? = nil,
        boardWebhookID: String? = nil, createdAt: String? = nil, lastReconciledAt: String? = nil, lastReconcileError: String? = nil,
        settings: SyncSettings = .default, trelloListName: String? = nil, archivedAt: String? = nil
    ) {
        self.trelloListName = trelloListName
        self.archivedAt = archivedAt
        self.id = id
        self.accountID = accountID
        self.name = name
        self.trelloBoardID = trelloBoardID
        self.trelloListID = trelloListID
        self.listWebhookID = listWebhookID
        self.boardWebhookID = boardWebhookID
        self.createdAt = createdAt
        self.lastReconciledAt = lastReconciledAt
        self.lastReconcileError = lastReconcileError
        self.settings = settings
    }

    /// When the list was paired: cards Trello made before it are not new (`InitialMode.newCards`).
    public var pairedAt: Date? { createdAt.flatMap(Timestamp.date) }

    /// A new pairing of a Trello list, before the store writes it.
    package static func new(
        accountID: String, name: String, trelloBoardID: String, trelloListID: String, settings: SyncSettings, trelloListName: String? = nil
    ) -> Self {
        Self(
            id: Hex.lowercase(UUID()), accountID: accountID, name: name, trelloBoardID: trelloBoardID, trelloListID: trelloListID,
            createdAt: Timestamp.now(), settings: settings, trelloListName: trelloListName)
    }
}

/// An account as the API shows it (credentials still whole here; the API masks them).
public struct AccountDetails: Sendable, Equatable {
    public var id: String
    public var trelloAPIKey: String?
    public var trelloToken: String?
    public var trelloWebhookSecret: String?
    public var conflictPolicy: ConflictPolicy
    public var deleteMode: DeleteMode
    public var createdAt: String
    public var updatedAt: String
    /// Why the account needs its user, or nil.
    public var needsAttention: AttentionReason? = nil
    /// Where its all-day dates are written (`DayDate.instant(in:)`); nil: UTC.
    public var timeZone: AccountTimeZone? = nil
}

/// Fields of `PUT /dailyroundup/account`; nil leaves a field as it is.
public struct AccountUpdate: Sendable, Equatable {
    public var trelloAPIKey: String?
    public var trelloToken: String?
    public var trelloWebhookSecret: String?
    public var conflictPolicy: ConflictPolicy?
    public var deleteMode: DeleteMode?
    public var timeZone: AccountTimeZone?
    public init(
        trelloAPIKey: String? = nil, trelloToken: String? = nil, trelloWebhookSecret: String? = nil, conflictPolicy: ConflictPolicy? = nil,
        deleteMode: DeleteMode? = nil, timeZone: AccountTimeZone? = nil
    ) {
        self.timeZone = timeZone
        self.trelloAPIKey = trelloAPIKey
        self.trelloToken = trelloToken
        self.trelloWebhookSecret = trelloWebhookSecret
        self.conflictPolicy = conflictPolicy
        self.deleteMode = deleteMode
    }
}

public struct DeviceRecord: Sendable, Equatable {
    public var deviceID: String
    public var apnsToken: String
    public var platform: DevicePlatform
    public var environment: APNsEnvironment
    public var createdAt: String
    public var updatedAt: String
    /// The app the device registered with (its pushes' topic); nil: the server's default app (`ROUNDUP_APNS_TOPIC`).
    public var bundleID: BundleID? = nil
}

public struct ConflictRecord: Sendable, Equatable {
    public var id: Int64
    public var syncListID: String?
    public var trelloCardID: String?
    public var reminderID: String?
    public var field: String
    public var trelloValue: String?
    public var remindersValue: String?
    public var status: ConflictStatus
    public var createdAt: String
}

public struct DuplicateRecord: Sendable, Equatable {
    public var id: Int64
    public var syncListID: String
    public var reminderID: String?
    public var trelloCardID: String
    public var title: String
    public var dueDate: String?
    public var status: DuplicateStatus
    public var createdAt: String
}

/// One acknowledgement: the change id and, for a create, the reminder the app made for it.
public struct ChangeAck: Sendable, Equatable {
    public var id: Int64
    public var reminderID: String?
    public init(id: Int64, reminderID: String? = nil) {
        self.id = id
        self.reminderID = reminderID
    }
}

public enum AckResult: Sendable, Equatable {
    case acked([Int64])
    /// This id belongs to another account or never existed: nothing was acked.
    case notFound(Int64)
}

public enum StoreError: Error, Equatable, Sendable {
    case duplicateList
}

/// What the store knows of a card, before a batch is applied.
public struct TaskState: Sendable, Equatable {
    public var syncListID: String
    public var deleted: Bool
    /// The card's list filters its cards (`CardFilter`): an event of the card is decided from the whole card.
    public var listFiltered: Bool = false

    package init(syncListID: String, deleted: Bool, listFiltered: Bool = false) {
        self.syncListID = syncListID
        self.deleted = deleted
        self.listFiltered = listFiltered
    }
}

/// A pending change as stored: what the apps pull from `GET /dailyroundup/changes`. Its JSON columns stay as stored
/// (canonical JSON text), so the API puts them in a page without parsing and re-encoding them.
public struct PendingChange: Sendable, Equatable {
    public var id: Int64
    public var accountID: String
    public var syncListID: String
    public var changeType: ChangeType
    public var changedFieldsJSON: String
    public var fieldsJSON: String
    public var trelloCardID: String
    public var trelloActionID: String?
    /// The reminder the card maps to (its task's), if any.
    public var reminderID: String?
    public var createdAt: String
    /// The list a `move` left.
    public var fromSyncListID: String? = nil

    public var changedFields: [String] { PendingChangeCoding.changedFields(changedFieldsJSON) }
    public var fields: [String: JSONValue] { PendingChangeCoding.fields(fieldsJSON) }

    /// The columns every reader selects from `pending_changes p`, in the order both stores decode them.
    ///
    /// A change carries its card's reminder (`reminder_id`, migration v11): it is set from the card's task when the
    /// change is written, and triggers on `sync_tasks` keep it equal to the task's whenever the task's reminder is set,
    /// changed or deleted. Reading it with the change saves the page a lookup in `sync_tasks` per change, which was
    /// most of PostgreSQL's time for a page.
    package static let columns =
        "p.id, p.sync_list_id, p.change_type, p.changed_fields, p.fields, p.trello_card_id, p.trello_action_id, p.reminder_id, p.created_at, p.from_sync_list_id"
}

/// One observation of a card, ready to compare with what the store has.
public struct CardObservation: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// New values of some fields (`full` when it is the whole card, from a fetch).
        case fields([String: JSONValue], full: Bool)
        case removed
        /// Our own write coming back from Trello (these field values, or the card's removal when empty): nothing
        /// changes, and the activity history says why nothing was sent.
        case echo([String: JSONValue])
    }
    public var accountID: String
    public var syncListID: String
    public var cardID: String
    public var actionID: String?
    public var actionDate: Date
    public var kind: Kind
    /// The fields' values before the action, where Trello's payload tells them (`data.old` of an `updateCard`).
    public var previous: [String: JSONValue] = [:]

    public init(accountID: String, syncListID: String, cardID: String, actionID: String?, actionDate: Date, kind: Kind) {
        self.accountID = accountID
        self.syncListID = syncListID
        self.cardID = cardID
        self.actionID = actionID
        self.actionDate = actionDate
        self.kind = kind
    }
}

/// What the worker needs to know before it fetches and applies a batch, read in one transaction.
public struct BatchContext: Sendable {
    /// (account, Trello list id) → sync list.
    public var lists: [AccountScoped: SyncListRecord] = [:]
    /// (account, Trello board id) → the account syncs at least one list on that board.
    public var boards: Set<AccountScoped> = []
    /// (account, card id) → task.
    public var tasks: [AccountScoped: TaskState] = [:]
    public var credentials: [String: TrelloCredentials] = [:]
    /// (account, board) → the Priority custom field, where known.
    public var priorityFields: [AccountScoped: PriorityField] = [:]
    public init() {}
}

public struct AccountScoped: Sendable, Hashable {
    public var accountID: String
    public var id: String
    public init(_ accountID: String, _ id: String) {
        self.accountID = accountID
        self.id = id
    }
}

/// What a worker wants looked up for one event.
public struct BatchLookup: Sendable {
    public var accountID: String
    public var cardID: String
    public var listIDs: [String]
    public var boardID: String?
    public init(accountID: String, cardID: String, listIDs: [String], boardID: String?) {
        self.accountID = accountID
        self.cardID = cardID
        self.listIDs = listIDs
        self.boardID = boardID
    }
}

/// Secrets and model routes the ingress reads from Redis.
public struct RoutingSnapshot: Sendable, Equatable {
    public var secrets: [String: String]
    /// Trello model id (list or board) → account ids.
    public var routes: [String: Set<String>]
    /// Account id → the token of its webhook callback URL.
    public var tokens: [String: String] = [:]

    package init(secrets: [String: String], routes: [String: Set<String>], tokens: [String: String] = [:]) {
        self.secrets = secrets
        self.routes = routes
        self.tokens = tokens
    }
}

/// What one apply wrote: rows, the accounts that got them, and how many of each change type.
public struct AppliedChanges: Sendable, Equatable {
    public var written: Int
    public var accounts: Set<String>
    public var types: [ChangeType: Int]
    public init(written: Int = 0, accounts: Set<String> = [], types: [ChangeType: Int] = [:]) {
        self.written = written
        self.accounts = accounts
        self.types = types
    }
}
