import Foundation
import Hummingbird
import Logging
import RoundupCore
import RoundupRouting
import RoundupStore
import RoundupTrello

extension API {
    static func listJSON(_ list: SyncListRecord) -> JSONValue {
        .object([
            "sync_list_id": .string(list.id), "name": .string(list.name), "trello_list_id": .string(list.trelloListID),
            "trello_board_id": .string(list.trelloBoardID), "created_at": list.createdAt.json,
            "last_reconciled_at": list.lastReconciledAt.json, "last_reconcile_error": list.lastReconcileError.json,
        ])
    }

    static func validTrelloID(_ id: String, field: String) throws {
        guard id.count <= 64, id.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }) else {
            throw APIError.unprocessable("\(field) must be a Trello id (letters and digits)")
        }
    }

    func listLists(_ account: String) async throws -> Response {
        let lists = try await store.syncLists(accountID: account)
        return jsonResponse(.ok, .object(["lists": .array(lists.map(Self.listJSON))]))
    }

    func getList(_ account: String, _ id: String) async throws -> Response {
        guard let list = try await store.syncList(accountID: account, id: id) else { throw APIError.notFound("no list \(id)") }
        return jsonResponse(.ok, Self.listJSON(list))
    }

    /// Pairs a Trello list: stores it, registers the list and board webhooks (Trello checks the callback URL
    /// with HEAD first), then publishes the routes. Any failure removes what was made.
    func createList(_ account: String, _ request: Request, _ context: APIRequestContext) async throws -> Response {
        let body = try await JSONBody.read(request, context: context)
        try body.allowOnly(["name", "trello_board_id", "trello_list_id"])
        let name = try body.requiredString("name", maxLength: 200)
        let boardID = try body.requiredString("trello_board_id", maxLength: 64)
        let listID = try body.requiredString("trello_list_id", maxLength: 64)
        try Self.validTrelloID(boardID, field: "trello_board_id")
        try Self.validTrelloID(listID, field: "trello_list_id")

        guard let details = try await store.accountDetails(id: account) else { throw APIError.unauthorized("the account is gone") }
        let missing = [
            details.trelloAPIKey == nil ? "trello_api_key" : nil, details.trelloToken == nil ? "trello_token" : nil,
            details.trelloWebhookSecret == nil ? "trello_webhook_secret" : nil,
        ].compactMap { $0 }
        guard missing.isEmpty, let credentials = Self.credentials(details) else {
            throw APIError.conflict("set \(missing.joined(separator: ", ")) with PUT /dailyroundup/account first")
        }

        let list: SyncListRecord
        do {
            list = try await store.createSyncList(accountID: account, name: name, trelloBoardID: boardID, trelloListID: listID)
        } catch StoreError.duplicateList {
            throw APIError.conflict("trello list \(listID) is already synced")
        }
        // The account's own callback URL (`WebhookCallback`); the ingress checks its token, so it is published first.
        guard let callbackToken = try await store.account(id: account)?.webhookToken else { throw APIError.unauthorized("the account is gone") }
        try await RoutePublisher.publishToken(account: account, token: callbackToken, redis: redis, keys: options.keys)
        let callback = WebhookCallback.url(publicURL: options.publicURL, account: account, token: callbackToken)
        var made: [String] = []
        do {
            let listHook = try await trello.createWebhook(callbackURL: callback, modelID: listID, description: "DailyRoundup list \(name)", credentials: credentials)
            made.append(listHook)
            // One board webhook per account and board: lists on the same board share it.
            let siblings = try await store.syncLists(accountID: account).filter { $0.trelloBoardID == boardID && $0.id != list.id }
            let boardHook: String
            if let shared = siblings.compactMap(\.boardWebhookID).first {
                boardHook = shared
            } else {
                boardHook = try await trello.createWebhook(callbackURL: callback, modelID: boardID, description: "DailyRoundup board", credentials: credentials)
                made.append(boardHook)
            }
            try await store.setWebhooks(syncListID: list.id, listWebhookID: listHook, boardWebhookID: boardHook)
            try await RoutePublisher.publishRoutes(account: account, models: [listID, boardID], store: store, redis: redis, keys: options.keys)
        } catch {
            await deleteWebhooks(Set(made), credentials: credentials, account: account, syncList: list.id)
            _ = try? await store.deleteSyncList(accountID: account, id: list.id)
            if let trelloError = error as? TrelloError {
                // The app's ids or the account's credentials are wrong: the request's fault (422). Trello unreachable,
                // failing, or unable to reach our ingress (its HEAD check): not the app's (502), try again later.
                switch trelloError.status {
                case 401?, 403?:
                    throw APIError.unprocessable("Trello refused the account's trello_api_key or trello_token: \(trelloError.message)")
                case 400? where !trelloError.message.contains("did not return 200"), 404? where !trelloError.message.contains("did not return 200"):
                    throw APIError.unprocessable("Trello refused the webhook for these ids: \(trelloError.message)")
                default:
                    throw APIError.badGateway("Trello refused the webhook: \(trelloError.message)")
                }
            }
            if error is APIError { throw error }
            throw APIError.unavailable("the list could not be set up (\(type(of: error))); nothing was kept, try again")
        }
        logger.info("list paired", metadata: ["account": "\(account)", "sync_list": "\(list.id)"])
        guard let stored = try await store.syncList(accountID: account, id: list.id) else { throw APIError.notFound("no list \(list.id)") }
        return jsonResponse(.created, Self.listJSON(stored))
    }

    func deleteList(_ account: String, _ id: String) async throws -> Response {
        guard let list = try await store.syncList(accountID: account, id: id) else { throw APIError.notFound("no list \(id)") }
        let others = try await store.syncLists(accountID: account).filter { $0.id != id }
        var hooks = Set([list.listWebhookID].compactMap { $0 })
        if let board = list.boardWebhookID, !others.contains(where: { $0.boardWebhookID == board }) { hooks.insert(board) }
        // Trello refusing or unreachable never keeps the list: the webhooks that may remain are logged and counted.
        let credentials = try await store.accountDetails(id: account).flatMap(Self.credentials)
        await deleteWebhooks(hooks, credentials: credentials, account: account, syncList: id)
        _ = try await store.deleteSyncList(accountID: account, id: id)
        // Published as the store has them now: the board stays routed while another list of the account is on it.
        let models = [list.trelloListID, list.trelloBoardID]
        do {
            try await RoutePublisher.publishRoutes(account: account, models: models, store: store, redis: redis, keys: options.keys)
        } catch {
            logger.warning("removing routes failed", metadata: ["account": "\(account)", "error": "\(error)"])
        }
        return Response(status: .noContent)
    }
}
