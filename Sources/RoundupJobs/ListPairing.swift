import Logging
public import RoundupCore
public import RoundupStore
public import RoundupTrello

/// Pairs a Trello list with a reminders list, whole or not at all: asks Trello that the list is on the board named
/// with it, stores it, registers its webhooks (`WebhookRegistrar`), then publishes its routes for the ingress. Any
/// failure removes what was made (webhooks at Trello, the stored list). The apps' `POST /dailyroundup/lists` is a thin
/// wrapper around it.
public struct ListPairing: Sendable {
    /// The webhooks made with a list; its store, Redis and logger serve the pairing too.
    let webhooks: WebhookRegistrar
    var store: any ListRepository & AccountRepository & ReconcileStore { webhooks.store }

    public init(webhooks: WebhookRegistrar) { self.webhooks = webhooks }

    /// The board's labels (`{id, name, color}`) and its Priority field, both read from Trello now: what the apps may
    /// offer for a list's cards. A Priority field that changed since the store read it (an option added after pairing)
    /// is stored, so the worker and the jobs map its options from then on.
    public func boardVocabulary(
        accountID: String, boardID: String, credentials: TrelloCredentials
    ) async throws -> (labels: [[String: JSONValue]], priority: PriorityField?) {
        let labels = try await webhooks.trello.boardLabels(boardID: boardID, credentials: credentials)
        let field = try await webhooks.trello.priorityField(boardID: boardID, credentials: credentials)
        if let field, try await store.priorityField(accountID: accountID, boardID: boardID) != field {
            try await store.savePriorityField(accountID: accountID, boardID: boardID, field: field)
        }
        return (labels, field)
    }

    /// The Trello member the account's token belongs to: whom `me` names among a list filter's members.
    public func tokenMember(_ credentials: TrelloCredentials) async throws -> String {
        try await webhooks.trello.memberID(credentials: credentials)
    }

    /// Why a pairing made nothing.
    public enum Failure: Error, Sendable {
        /// The account was deleted meanwhile.
        case accountGone
        /// The account already syncs this Trello list.
        case alreadyPaired(trelloListID: String)
        /// Trello has no such list (or none the account's token may see as one).
        case listNotFound(trelloListID: String)
        /// The list is on another board than the one named with it (`actualBoardID`, as Trello says).
        case listNotOnBoard(trelloListID: String, trelloBoardID: String, actualBoardID: String)
        /// The list is archived in Trello.
        case listArchived(trelloListID: String)
        /// Trello refused or failed (its kind says whose fault: `TrelloError.Kind`).
        case trello(TrelloError)
        /// The store or Redis failed part way (what was made is removed): try again.
        case unavailable(String)
        /// The store failed before anything was made.
        case store(any Error)
    }

    /// The pairing: the list as stored, with its webhooks.
    public func pair(
        account: String, name: String, trelloBoardID: String, trelloListID: String, settings: SyncSettings, credentials: TrelloCredentials
    ) async throws(Failure) -> SyncListRecord {
        // The list must be the board's: the board's webhook and routes are made with it, and a list on another board
        // would be paired with events of a board it is not on (and none of its own board's label or custom-field edits).
        let found = try await check(trelloListID: trelloListID, onBoard: trelloBoardID, credentials: credentials)
        let list: SyncListRecord
        do {
            list = try await store.createSyncList(
                accountID: account, name: name, trelloBoardID: trelloBoardID, trelloListID: trelloListID, settings: settings,
                trelloListName: found.name)
        } catch StoreError.duplicateList {
            throw .alreadyPaired(trelloListID: trelloListID)
        } catch {
            // Nothing was made: the store's own failure, for the caller to answer as it answers any.
            throw .store(error)
        }
        var made: [String] = []
        do {
            guard let callbackToken = try await store.account(id: account)?.webhookToken else { throw Failure.accountGone }
            guard let callback = try await webhooks.callbacks.url(account: account, token: callbackToken) else {
                throw Failure.unavailable("the server has no public URL for Trello to call")
            }
            do {
                made = try await webhooks.registerNew(list, callback: callback, credentials: credentials).made
            } catch let failed as WebhookRegistrar.RegistrationFailed {
                made = failed.made
                throw failed.underlying
            }
            try await RoutePublisher.publishRoutes(
                account: account, models: [trelloListID, trelloBoardID], store: store, redis: webhooks.callbacks.redis, keys: webhooks.callbacks.keys)
            guard let stored = try await store.syncList(accountID: account, id: list.id) else { throw Failure.accountGone }
            webhooks.logger.info("list paired", metadata: ["account": "\(account)", "sync_list": "\(list.id)"])
            return stored
        } catch {
            await webhooks.unregister(Set(made), credentials: credentials, account: account, syncList: list.id)
            _ = try? await store.deleteSyncList(accountID: account, id: list.id)
            switch error {
            case let failure as Failure: throw failure
            case let trello as TrelloError: throw .trello(trello)
            default: throw .unavailable("the list could not be set up (\(type(of: error))); nothing was kept, try again")
            }
        }
    }

    /// Asks Trello for the list (`GET /1/lists/{id}`) before anything is made: it must exist, be on `board` and be open.
    @discardableResult
    func check(trelloListID: String, onBoard board: String, credentials: TrelloCredentials) async throws(Failure) -> TrelloClient.ListInfo {
        let found: TrelloClient.ListInfo?
        do {
            found = try await webhooks.trello.list(id: trelloListID, credentials: credentials)
        } catch let error as TrelloError {
            throw .trello(error)
        } catch {
            throw .unavailable("Trello could not be asked about list \(trelloListID) (\(type(of: error))); nothing was made, try again")
        }
        guard let found else { throw .listNotFound(trelloListID: trelloListID) }
        guard found.boardID == board else {
            throw .listNotOnBoard(trelloListID: trelloListID, trelloBoardID: board, actualBoardID: found.boardID)
        }
        guard !found.closed else { throw .listArchived(trelloListID: trelloListID) }
        return found
    }

    /// Unpairs a list: its webhooks removed at Trello (its board's only when no other list of the account shares it;
    /// Trello refusing or unreachable never keeps the list: what may remain is logged and counted), the list deleted
    /// with its tasks and pending changes, then the routes published as the store has them now (the board stays routed
    /// while another list of the account is on it).
    public func unpair(_ list: SyncListRecord, credentials: TrelloCredentials?) async throws {
        let account = list.accountID
        let hooks = WebhookRegistrar.webhooks(of: list, others: try await store.syncLists(accountID: account))
        await webhooks.unregister(hooks, credentials: credentials, account: account, syncList: list.id)
        _ = try await store.deleteSyncList(accountID: account, id: list.id)
        do {
            try await RoutePublisher.publishRoutes(
                account: account, models: [list.trelloListID, list.trelloBoardID], store: store, redis: webhooks.callbacks.redis,
                keys: webhooks.callbacks.keys)
        } catch {
            webhooks.logger.warning("removing routes failed", metadata: ["account": "\(account)", "error": "\(error)"])
        }
    }
}
