package import Foundation
package import RoundupCore

/// An account as the store keeps it: its Trello credentials (as the worker needs them to read cards) and its
/// webhooks' secret and callback token.
package struct AccountRecord: Sendable, Equatable {
    package var id: String
    package var trelloAPIKey: String?
    package var trelloToken: String?
    package var trelloWebhookSecret: String?
    /// The token of the account's webhook callback URL (`WebhookCallback`).
    package var webhookToken: String? = nil
}

package struct SyncListRecord: Sendable, Equatable, Hashable {
    package var id: String
    package var accountID: String
    package var name: String
    package var trelloBoardID: String
    package var trelloListID: String
    package var listWebhookID: String? = nil
    package var boardWebhookID: String? = nil
    package var createdAt: String? = nil
    package var lastReconciledAt: String? = nil
    package var lastReconcileError: String? = nil
    /// How the list syncs (`sync_lists.settings`, canonical JSON; NULL is the defaults).
    package var settings: SyncSettings = .default
    /// The Trello list's name as last read (at pairing, then by reconciliation); a new one there renames the list.
    /// Nil for a list paired before it was kept (the next reconciliation reads it, renaming nothing).
    package var trelloListName: String? = nil
    /// When the Trello list was found archived: the pairing is paused (no job runs against it, nothing is deleted)
    /// until it is restored, which reconciles it.
    package var archivedAt: String? = nil

    /// Whether the pairing is paused because the Trello list is archived.
    package var archived: Bool { archivedAt != nil }

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
    package var pairedAt: Date? { createdAt.flatMap(Timestamp.date) }

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
package struct AccountDetails: Sendable, Equatable {
    package var id: String
    package var trelloAPIKey: String?
    package var trelloToken: String?
    package var trelloWebhookSecret: String?
    package var conflictPolicy: ConflictPolicy
    package var deleteMode: DeleteMode
    package var createdAt: String
    package var updatedAt: String
    /// Why the account needs its user, or nil.
    package var needsAttention: AttentionReason? = nil
    /// Where its all-day dates are written (`DayDate.instant(in:)`); nil: UTC.
    package var timeZone: AccountTimeZone? = nil
}

/// Fields of `PUT /dailyroundup/account`; nil leaves a field as it is.
package struct AccountUpdate: Sendable, Equatable {
    package var trelloAPIKey: String?
    package var trelloToken: String?
    package var trelloWebhookSecret: String?
    package var conflictPolicy: ConflictPolicy?
    package var deleteMode: DeleteMode?
    package var timeZone: AccountTimeZone?
    package init(
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

package struct DeviceRecord: Sendable, Equatable {
    package var deviceID: String
    package var apnsToken: String
    package var platform: DevicePlatform
    package var environment: APNsEnvironment
    package var createdAt: String
    package var updatedAt: String
    /// The app the device registered with (its pushes' topic); nil: the server's default app (`ROUNDUP_APNS_TOPIC`).
    package var bundleID: BundleID? = nil
}

package struct ConflictRecord: Sendable, Equatable {
    package var id: Int64
    package var syncListID: String?
    package var trelloCardID: String?
    package var reminderID: String?
    package var field: String
    package var trelloValue: String?
    package var remindersValue: String?
    package var status: ConflictStatus
    package var createdAt: String
}

package struct DuplicateRecord: Sendable, Equatable {
    package var id: Int64
    package var syncListID: String
    package var reminderID: String?
    package var trelloCardID: String
    package var title: String
    package var dueDate: String?
    package var status: DuplicateStatus
    package var createdAt: String
}

/// One acknowledgement: the change id and, for a create, the reminder the app made for it.
package struct ChangeAck: Sendable, Equatable {
    package var id: Int64
    package var reminderID: String?
    package init(id: Int64, reminderID: String? = nil) {
        self.id = id
        self.reminderID = reminderID
    }
}

package enum AckResult: Sendable, Equatable {
    case acked([Int64])
    /// This id belongs to another account or never existed: nothing was acked.
    case notFound(Int64)
}

package enum StoreError: Error, Equatable, Sendable {
    case duplicateList
}

/// What the store knows of a card, before a batch is applied.
package struct TaskState: Sendable, Equatable {
    package var syncListID: String
    package var deleted: Bool
    /// The card's list filters its cards (`CardFilter`): an event of the card is decided from the whole card.
    package var listFiltered: Bool = false

    package init(syncListID: String, deleted: Bool, listFiltered: Bool = false) {
        self.syncListID = syncListID
        self.deleted = deleted
        self.listFiltered = listFiltered
    }
}

/// A pending change as stored: what the apps pull from `GET /dailyroundup/changes`. Its JSON columns stay as stored
/// (canonical JSON text), so the API puts them in a page without parsing and re-encoding them.
package struct PendingChange: Sendable, Equatable {
    package var id: Int64
    package var accountID: String
    package var syncListID: String
    package var changeType: ChangeType
    package var changedFieldsJSON: String
    package var fieldsJSON: String
    package var trelloCardID: String
    package var trelloActionID: String?
    /// The reminder the card maps to (its task's), if any.
    package var reminderID: String?
    package var createdAt: String
    /// The list a `move` left.
    package var fromSyncListID: String? = nil

    package var changedFields: [String] { PendingChangeCoding.changedFields(changedFieldsJSON) }
    package var fields: [String: JSONValue] { PendingChangeCoding.fields(fieldsJSON) }

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
package struct CardObservation: Sendable, Equatable {
    package enum Kind: Sendable, Equatable {
        /// New values of some fields (`full` when it is the whole card, from a fetch).
        case fields([String: JSONValue], full: Bool)
        case removed
        /// Our own write coming back from Trello (these field values, or the card's removal when empty): nothing
        /// changes, and the activity history says why nothing was sent.
        case echo([String: JSONValue])
    }
    package var accountID: String
    package var syncListID: String
    package var cardID: String
    package var actionID: String?
    package var actionDate: Date
    package var kind: Kind
    /// The fields' values before the action, where Trello's payload tells them (`data.old` of an `updateCard`).
    package var previous: [String: JSONValue] = [:]

    package init(accountID: String, syncListID: String, cardID: String, actionID: String?, actionDate: Date, kind: Kind) {
        self.accountID = accountID
        self.syncListID = syncListID
        self.cardID = cardID
        self.actionID = actionID
        self.actionDate = actionDate
        self.kind = kind
    }
}

/// What the worker needs to know before it fetches and applies a batch, read in one transaction.
package struct BatchContext: Sendable {
    /// (account, Trello list id) → sync list.
    package var lists: [AccountScoped: SyncListRecord] = [:]
    /// (account, Trello board id) → the account syncs at least one list on that board.
    package var boards: Set<AccountScoped> = []
    /// (account, card id) → task.
    package var tasks: [AccountScoped: TaskState] = [:]
    package var credentials: [String: TrelloCredentials] = [:]
    /// (account, board) → the Priority custom field, where known.
    package var priorityFields: [AccountScoped: PriorityField] = [:]
    package init() {}
}

package struct AccountScoped: Sendable, Hashable {
    package var accountID: String
    package var id: String
    package init(_ accountID: String, _ id: String) {
        self.accountID = accountID
        self.id = id
    }
}

/// What a worker wants looked up for one event.
package struct BatchLookup: Sendable {
    package var accountID: String
    package var cardID: String
    package var listIDs: [String]
    package var boardID: String?
    package init(accountID: String, cardID: String, listIDs: [String], boardID: String?) {
        self.accountID = accountID
        self.cardID = cardID
        self.listIDs = listIDs
        self.boardID = boardID
    }
}

/// Secrets and model routes the ingress reads from Redis.
package struct RoutingSnapshot: Sendable, Equatable {
    package var secrets: [String: String]
    /// Trello model id (list or board) → account ids.
    package var routes: [String: Set<String>]
    /// Account id → the token of its webhook callback URL.
    package var tokens: [String: String] = [:]

    package init(secrets: [String: String], routes: [String: Set<String>], tokens: [String: String] = [:]) {
        self.secrets = secrets
        self.routes = routes
        self.tokens = tokens
    }
}

/// What one apply wrote: rows, the accounts that got them, and how many of each change type.
package struct AppliedChanges: Sendable, Equatable {
    package var written: Int
    package var accounts: Set<String>
    package var types: [ChangeType: Int]
    package init(written: Int = 0, accounts: Set<String> = [], types: [ChangeType: Int] = [:]) {
        self.written = written
        self.accounts = accounts
        self.types = types
    }
}
