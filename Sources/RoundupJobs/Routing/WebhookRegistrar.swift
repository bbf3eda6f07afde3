public import Logging
import Metrics
public import RoundupCore
public import RoundupStore
public import RoundupTrello

/// The one place webhooks are made, mended and removed at Trello, with one description (`WebhookDescription`) and one
/// rule for board webhooks: an account has one per board, shared by its lists on that board. Used by the pairing of a
/// list (`ListPairing`), the reconciliation (`Reconciler`) and the deletion of a list or an account.
public struct WebhookRegistrar: Sendable {
    let store: any ListRepository & AccountRepository & ReconcileStore
    let trello: TrelloClient
    /// Where Trello calls us.
    let callbacks: WebhookCallbacks
    let logger: Logger

    public init(store: any ListRepository & AccountRepository & ReconcileStore, trello: TrelloClient, callbacks: WebhookCallbacks, logger: Logger) {
        self.store = store
        self.trello = trello
        self.callbacks = callbacks
        self.logger = logger
    }

    /// A webhook made for a new list, kept apart so a failure after it can remove it (`unregister`).
    public struct Registered: Sendable {
        public var list: String
        public var board: String
        /// The webhooks made here (the board's is not among them when another list of the account shares it).
        public var made: [String]
    }

    /// Registers a new list's webhooks (Trello checks the callback URL with HEAD first) and records them on the list: the
    /// list's own, and the board's unless another list of the account on that board has one. Throws with what it made
    /// so far in `RegistrationFailed`.
    public func registerNew(_ list: SyncListRecord, callback: String, credentials: TrelloCredentials) async throws -> Registered {
        var made: [String] = []
        do {
            let listHook = try await trello.createWebhook(
                callbackURL: callback, modelID: list.trelloListID, description: WebhookDescription.list(list.name), credentials: credentials)
            made.append(listHook)
            let boardHook: String
            if let shared = try await sharedBoardWebhook(for: list) {
                boardHook = shared
            } else {
                boardHook = try await trello.createWebhook(
                    callbackURL: callback, modelID: list.trelloBoardID, description: WebhookDescription.board, credentials: credentials)
                made.append(boardHook)
            }
            try await store.setWebhooks(syncListID: list.id, listWebhookID: listHook, boardWebhookID: boardHook)
            return Registered(list: listHook, board: boardHook, made: made)
        } catch {
            throw RegistrationFailed(made: made, underlying: error)
        }
    }

    /// A registration that failed part way: the webhooks it made, and why.
    public struct RegistrationFailed: Error {
        public var made: [String]
        public var underlying: any Error
    }

    /// The board webhook another list of the account on the same board has.
    func sharedBoardWebhook(for list: SyncListRecord) async throws -> String? {
        try await store.syncLists(accountID: list.accountID)
            .filter { $0.trelloBoardID == list.trelloBoardID && $0.id != list.id }
            .compactMap(\.boardWebhookID).first
    }

    /// Registers the list's and board's webhooks again where Trello lost, deactivated or misdirects them; returns how
    /// many. A webhook still pointing at an older callback URL (without the account's token) is moved to the account's
    /// own. A list that has no board webhook while another of the account's lists on the board has one takes that one
    /// (then checked like its own): one board webhook per account and board, as the pairing leaves it.
    public func repair(_ list: SyncListRecord, callbackToken: String?, credentials: TrelloCredentials) async throws -> Int {
        guard let callbackToken, let callback = try await callbacks.url(account: list.accountID, token: callbackToken) else { return 0 }
        var boardWebhookID = list.boardWebhookID
        if boardWebhookID == nil, let shared = try await sharedBoardWebhook(for: list) {
            try await store.replaceWebhook(accountID: list.accountID, old: nil, new: shared, board: true, syncListID: list.id)
            boardWebhookID = shared
        }
        var registered = 0
        for (board, id, model) in [(false, list.listWebhookID, list.trelloListID), (true, boardWebhookID, list.trelloBoardID)] {
            let info = try await id.asyncMap { try await trello.webhook(id: $0, credentials: credentials) } ?? nil
            if let info, info.active, info.callbackURL == callback, info.idModel == model { continue }
            let reason = info == nil ? (id == nil ? "none" : "missing") : (!info!.active ? "inactive" : "callback_changed")
            // Same callback and model: Trello refuses a second one, so the old goes first. A new callback URL: the new
            // webhook first (its HEAD check may fail), the old one after, so the list is never left without.
            let sameTarget = info.map { $0.callbackURL == callback && $0.idModel == model } ?? false
            if let info, sameTarget { try await trello.deleteWebhook(id: info.id, credentials: credentials) }
            let newID = try await trello.createWebhook(
                callbackURL: callback, modelID: model, description: board ? WebhookDescription.board : WebhookDescription.list(list.name),
                credentials: credentials)
            if let info, !sameTarget { try await trello.deleteWebhook(id: info.id, credentials: credentials) }
            // Every list of the account that shared the old board webhook takes the new one.
            try await store.replaceWebhook(accountID: list.accountID, old: id, new: newID, board: board, syncListID: list.id)
            Counter(label: "roundup_webhooks_reregistered_total", dimensions: [("reason", reason)]).increment()
            logger.notice("webhook registered again", metadata: ["list": "\(list.id)", "model": "\(model)", "reason": "\(reason)"])
            registered += 1
        }
        return registered
    }

    /// The webhooks to remove with a list: its own, and the board's unless another of `others` (the account's other
    /// lists) shares it.
    public static func webhooks(of list: SyncListRecord, others: [SyncListRecord]) -> Set<String> {
        var hooks = Set([list.listWebhookID].compactMap { $0 })
        if let board = list.boardWebhookID, !others.contains(where: { $0.id != list.id && $0.boardWebhookID == board }) { hooks.insert(board) }
        return hooks
    }

    /// Why webhooks may remain at Trello (`roundup_webhooks_orphaned_total{reason}`).
    public enum OrphanedWebhooks: String, Sendable {
        /// The account has no key and token to delete them with.
        case noCredentials = "no_credentials"
        /// Trello refused the key or the token.
        case revoked
        /// Trello did not answer, or failed.
        case unreachable
        /// Trello refused the deletion otherwise.
        case refused
    }

    /// Deletes webhooks at Trello and never fails the caller: a deletion must not depend on Trello. Already gone (404)
    /// counts as deleted. At the first refusal (401/403: the user revoked the token; another 4xx) or failure (Trello
    /// unreachable or failing after a retry) the rest is not tried: every id not deleted may remain at Trello, and is
    /// logged (`webhooks may remain at trello`, ids in metadata) and counted (`roundup_webhooks_orphaned_total{reason}`).
    /// Such a webhook keeps calling a URL that no longer routes anywhere; Trello deactivates it after its failures.
    public func unregister(_ ids: Set<String>, credentials: TrelloCredentials?, account: String, syncList: String? = nil) async {
        var remaining = ids.sorted()
        guard !remaining.isEmpty else { return }
        var reason = OrphanedWebhooks.noCredentials
        var detail = "the account has no trello_api_key or trello_token"
        if let credentials {
            let client = trello.with(maxAttempts: 2)
            while let id = remaining.first {
                do {
                    try await client.deleteWebhook(id: id, credentials: credentials)
                    remaining.removeFirst()
                } catch let error as TrelloError {
                    reason = error.isCredentialFailure ? .revoked : error.isTransient ? .unreachable : .refused
                    detail = error.description
                    break
                } catch {
                    reason = .unreachable
                    detail = TrelloClient.describe(error)
                    break
                }
            }
        }
        guard !remaining.isEmpty else { return }
        Counter(label: "roundup_webhooks_orphaned_total", dimensions: [("reason", reason.rawValue)]).increment(by: remaining.count)
        var metadata: Logger.Metadata = [
            "account": "\(account)", "webhooks": "\(remaining.joined(separator: ","))", "reason": "\(reason.rawValue)", "error": "\(detail)",
        ]
        if let syncList { metadata["sync_list"] = "\(syncList)" }
        logger.warning("webhooks may remain at trello", metadata: metadata)
    }
}
