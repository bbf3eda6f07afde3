import Foundation
import Hummingbird
import Logging
import RoundupCore
import RoundupRouting
import RoundupStore
import RoundupTrello

extension API {
    func createAccount(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        guard let bootstrap = options.bootstrapToken else {
            throw APIError.forbidden("account creation is off: the server has no ROUNDUP_BOOTSTRAP_TOKEN")
        }
        guard let given = Self.bearerToken(request),
              constantTimeEquals(Array(Self.hash(given).utf8), Array(Self.hash(bootstrap).utf8))
        else { throw APIError.unauthorized("account creation needs the bootstrap token as Bearer") }
        let token = Self.newToken()
        let account = try await store.createAccount(authTokenHash: Self.hash(token))
        logger.info("account created", metadata: ["account": "\(account)"])
        return jsonResponse(.created, .object(["account_id": .string(account), "auth_token": .string(token)]))
    }

    static func accountJSON(_ a: AccountDetails) -> JSONValue {
        .object([
            "account_id": .string(a.id),
            "trello_api_key": maskSecret(a.trelloAPIKey).json,
            "trello_token": maskSecret(a.trelloToken).json,
            "trello_webhook_secret": maskSecret(a.trelloWebhookSecret).json,
            "conflict_policy": .string(a.conflictPolicy), "delete_mode": .string(a.deleteMode),
            "created_at": .string(a.createdAt), "updated_at": .string(a.updatedAt),
            // Set when the user must act (e.g. `trello_token_revoked`: send a new trello_token); cleared by doing so.
            "needs_attention": a.needsAttention.json,
        ])
    }

    func getAccount(_ account: String) async throws -> Response {
        guard let details = try await store.accountDetails(id: account) else { throw APIError.unauthorized("the account is gone") }
        return jsonResponse(.ok, Self.accountJSON(details))
    }

    func updateAccount(_ account: String, _ request: Request, _ context: APIRequestContext) async throws -> Response {
        let body = try await JSONBody.read(request, context: context)
        try body.allowOnly(["trello_api_key", "trello_token", "trello_webhook_secret", "conflict_policy", "delete_mode"])
        let update = AccountUpdate(
            trelloAPIKey: try body.credential("trello_api_key", required: false, maxLength: 200),
            trelloToken: try body.credential("trello_token", required: false, maxLength: 500),
            trelloWebhookSecret: try body.credential("trello_webhook_secret", required: false, maxLength: 500),
            conflictPolicy: try body.oneOf("conflict_policy", ["manual", "lww", "prefer_trello", "prefer_reminders"], required: false),
            deleteMode: try body.oneOf("delete_mode", ["archive", "delete"], required: false))
        guard update != AccountUpdate() else {
            throw APIError.unprocessable("nothing to update: send trello_api_key, trello_token, trello_webhook_secret, conflict_policy or delete_mode")
        }
        guard let details = try await store.updateAccount(id: account, update) else { throw APIError.unauthorized("the account is gone") }
        if let secret = update.trelloWebhookSecret {
            do {
                try await RoutePublisher.publishSecret(account: account, secret: secret, redis: redis, keys: options.keys)
            } catch {
                // Saved, but the ingress does not know yet; repeating the request is safe.
                throw APIError.unavailable("saved, but the webhook receiver could not be told (Redis unreachable); repeat the request")
            }
        }
        return jsonResponse(.ok, Self.accountJSON(details))
    }

    func rotateToken(_ account: String) async throws -> Response {
        let token = Self.newToken()
        try await store.rotateToken(accountID: account, newTokenHash: Self.hash(token))
        logger.info("token rotated", metadata: ["account": "\(account)"])
        return jsonResponse(.ok, .object(["account_id": .string(account), "auth_token": .string(token)]))
    }

    func deleteAccount(_ account: String) async throws -> Response {
        let lists = try await store.syncLists(accountID: account)
        if let details = try await store.accountDetails(id: account), let credentials = Self.credentials(details) {
            try await deleteWebhooks(Set(lists.flatMap { [$0.listWebhookID, $0.boardWebhookID].compactMap { $0 } }), credentials: credentials)
        }
        let removed = try await store.deleteAccount(id: account)
        let models = Array(Set(removed.flatMap { [$0.trelloListID, $0.trelloBoardID] }))
        do {
            try await RoutePublisher.removeAccount(account: account, models: models, redis: redis, keys: options.keys)
        } catch {
            // The account is gone from the store; stale routes only make the ingress answer 401/404 for it.
            logger.warning("removing routes failed", metadata: ["account": "\(account)", "error": "\(error)"])
        }
        logger.info("account deleted", metadata: ["account": "\(account)"])
        return Response(status: .noContent)
    }

    static func credentials(_ details: AccountDetails) -> TrelloCredentialsValue? {
        guard let key = details.trelloAPIKey, let token = details.trelloToken else { return nil }
        return TrelloCredentialsValue(apiKey: key, token: token)
    }

    /// Deletes webhooks at Trello; a refusal stops the caller before anything is deleted here.
    func deleteWebhooks(_ ids: Set<String>, credentials: TrelloCredentialsValue) async throws {
        for id in ids.sorted() {
            do {
                try await trello.deleteWebhook(id: id, credentials: credentials)
            } catch {
                throw APIError.badGateway("Trello refused to delete webhook \(id): \(error)")
            }
        }
    }
}
