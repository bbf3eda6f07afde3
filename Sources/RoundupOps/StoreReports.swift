public import Foundation
public import RoundupCore
import RoundupRuntime
public import RoundupStore

/// `roundupctl accounts list`: each account with its lists and pending changes, its credentials masked.
public enum AccountsReport {
    public typealias Row = (details: AccountDetails, lists: Int, pendingChanges: Int)

    public static func json(_ row: Row) -> JSONValue {
        .object([
            "account_id": .string(row.details.id), "trello_api_key": maskSecret(row.details.trelloAPIKey).map(JSONValue.string) ?? .null,
            "trello_token": maskSecret(row.details.trelloToken).map(JSONValue.string) ?? .null,
            "trello_webhook_secret": maskSecret(row.details.trelloWebhookSecret).map(JSONValue.string) ?? .null,
            "lists": .number(Double(row.lists)), "pending_changes": .number(Double(row.pendingChanges)),
            "created_at": .string(row.details.createdAt),
        ])
    }

    public static func line(_ row: Row) -> String {
        let d = row.details
        return
            "\(d.id)  lists \(row.lists)  pending \(row.pendingChanges)  key \(maskSecret(d.trelloAPIKey) ?? "-")  token \(maskSecret(d.trelloToken) ?? "-")  created \(d.createdAt)"
    }
}

/// `roundupctl lists`: every synced list with its last reconciliation with Trello, and whether it is paused (its Trello
/// list archived).
public enum ListsReport {
    public static func json(_ list: SyncListRecord, needsAttention: Bool) -> JSONValue {
        .object([
            "sync_list_id": .string(list.id), "account_id": .string(list.accountID), "name": .string(list.name),
            "trello_list_id": .string(list.trelloListID), "last_reconciled_at": list.lastReconciledAt.map(JSONValue.string) ?? .null,
            "last_reconcile_error": list.lastReconcileError.map(JSONValue.string) ?? .null, "account_needs_attention": .bool(needsAttention),
            "archived_at": list.archivedAt.map(JSONValue.string) ?? .null,
        ])
    }

    /// One line for people; stored text made safe for a terminal.
    public static func line(_ list: SyncListRecord, needsAttention: Bool, now: Date = Date()) -> String {
        let last = list.lastReconciledAt.flatMap(Timestamp.date).map { String(format: "%.0f s ago", now.timeIntervalSince($0)) } ?? "never"
        let error = list.lastReconcileError.map { "  (last error: \(TerminalText.printable($0)))" } ?? ""
        let paused = list.archivedAt.map { "  PAUSED: trello list archived \(TerminalText.printable($0))" } ?? ""
        return
            "\(list.id)  \(TerminalText.printable(list.name))  trello \(TerminalText.printable(list.trelloListID))  reconciled \(last)\(error)\(paused)\(needsAttention ? "  ACCOUNT NEEDS ATTENTION" : "")"
    }
}
