import Hummingbird
import Logging
import NIOCore
import RoundupCore
import RoundupJobs
import RoundupRedis
import RoundupRuntime
import RoundupStore

/// `/dailyroundup/account`: creation with the bootstrap token (`bootstrap`), then the account's own routes behind its
/// token (`collection`).
struct AccountRoutes {
    let store: any AccountExport.Store
    /// `ROUNDUP_BOOTSTRAP_TOKEN`: account creation is off without it.
    let bootstrapToken: String?
    /// `ROUNDUP_EXPORTS_PER_ACCOUNT`, held in `leases` across the API processes.
    let exportsPerAccount: Int
    let leases: AccountLeases
    /// Failed bootstrap tokens count against the address like bad account tokens.
    let throttle: AuthThrottle
    /// Revocations reach every API process through the tokens' epochs, and end the account's open change streams.
    let signals: AccountSignals
    let webhooks: WebhookRegistrar
    let purge: AccountPurge
    let logger: Logger

    var bootstrap: RouteCollection<APIRequestContext> {
        let routes = RouteCollection(context: APIRequestContext.self)
        routes.post { request, context in try await create(request, context) }
        return routes
    }

    var collection: RouteCollection<AuthenticatedContext> {
        let routes = RouteCollection(context: AuthenticatedContext.self)
        routes.get { _, context in try await get(context.account) }
        routes.put { request, context in try await update(context.account, request, context) }
        routes.delete { _, context in try await delete(context.account, tokenHash: context.credential.tokenHash) }
        routes.post("token") { _, context in try await rotateToken(context.account, oldTokenHash: context.credential.tokenHash) }
        routes.get("export") { _, context in try await export(context.account, context) }
        return routes
    }

    /// `GET /dailyroundup/account/export`: the account's whole data (`AccountExport`), streamed as it is read, in
    /// pieces of at most `exportChunk` bytes (each written only once the client took the one before: a client that stops
    /// reading is closed by the write deadline, `ROUNDUP_HTTP_WRITE_TIMEOUT_SECONDS`). At most
    /// `ROUNDUP_EXPORTS_PER_ACCOUNT` run at once for an account on every process together: 429 beyond.
    func export(_ account: String, _ context: AuthenticatedContext) async throws -> Response {
        guard try await store.accountDetails(id: account) != nil else { throw APIError.notFound("no account \(account)") }
        let leases = self.leases
        guard let lease = await leases.acquire(.exports, account: account, limit: exportsPerAccount) else {
            throw APIError(
                .tooManyRequests, "too_many_exports",
                "the account runs \(exportsPerAccount) exports already; retry when one has finished", headers: [.retryAfter: "30"])
        }
        // However the connection ends, before the body runs or during it, the place is given back.
        context.connectionClosed?.whenComplete { _ in leases.releaseSoon(lease) }
        let exporter = AccountExport(store: store, pageSize: 100)
        let logger = self.logger
        let token = signals.streamToken(account: account, credential: context.credential, store: store)
        logger.info("account exported", metadata: ["account": "\(account)"])
        return Response(
            status: .ok,
            headers: [
                .contentType: "application/json", .contentDisposition: "attachment; filename=\"roundup-export.json\"", .cacheControl: "no-store",
            ],
            body: ResponseBody { writer in
                defer { leases.releaseSoon(lease) }
                var token = token
                do {
                    var chunk = ByteBuffer()
                    var written = 0
                    _ = try await exporter.write(accountID: account) { piece in
                        chunk.writeString(piece)
                        if chunk.readableBytes >= Self.exportChunk {
                            // Its lease lost (it vanished from Redis in a stall and the account's places were taken
                            // meanwhile: `AccountLeases`), the export ends here, truncated, so the limit holds.
                            guard leases.holds(lease) else {
                                throw APIError(
                                    .tooManyRequests, "too_many_exports", "the export lost its place among the account's exports; retry later")
                            }
                            try await writer.write(contentsOf: ResponsePieces.split(chunk))
                            chunk = ByteBuffer()
                            written += 1
                            // A client that reads slowly makes an export last: its token must still hold as it goes on
                            // (every 16 pieces, about 1 MiB), or the document ends here, truncated.
                            if written % 16 == 0, await token.check() != .valid {
                                throw APIError.unauthorized("the token was revoked during the export")
                            }
                        }
                    }
                    if chunk.readableBytes > 0 { try await writer.write(chunk) }
                    try await writer.finish(nil)
                } catch {
                    // The status is sent already: the client sees a truncated document (not valid JSON), never a false end.
                    logger.error("account export failed", metadata: ["account": "\(account)", "error": "\(error)"])
                    throw error
                }
            })
    }

    /// The most an export holds before writing (a row may make one piece larger).
    static let exportChunk = 64 * 1024

    /// `POST /dailyroundup/account`: a new account, for the bootstrap token only.
    func create(_ request: Request, _ context: APIRequestContext) async throws -> EditedResponse<AccountToken> {
        guard let bootstrap = bootstrapToken else {
            throw APIError.forbidden("account creation is off: the server has no ROUNDUP_BOOTSTRAP_TOKEN")
        }
        guard let given = AuthenticationMiddleware.bearerToken(request) else {
            throw APIError.unauthorized("account creation needs the bootstrap token as Bearer")
        }
        // Guessing the bootstrap token counts against the address like a bad account token; an address over its
        // budget creates nothing, whatever it sends.
        let givenHash = AuthenticationMiddleware.hash(given)
        let attempt = AuthThrottle.Attempt(.bootstrap, request: request, context: context, tokenHash: givenHash)
        let refused = APIError.unauthorized("account creation needs the bootstrap token as Bearer")
        try await throttle.check(attempt, unauthorized: refused)
        guard constantTimeEquals(Array(givenHash.utf8), Array(AuthenticationMiddleware.hash(bootstrap).utf8)) else {
            await throttle.record(.bootstrap, attempt)
            throw refused
        }
        let token = AuthenticationMiddleware.newToken()
        let tokenHash = AuthenticationMiddleware.hash(token)
        let account = try await store.createAccount(authTokenHash: tokenHash)
        await throttle.accepted(tokenHash)
        logger.info("account created", metadata: ["account": "\(account)"])
        return EditedResponse(status: .created, response: AccountToken(accountID: account, authToken: token))
    }

    func get(_ account: String) async throws -> Account {
        guard let details = try await store.accountDetails(id: account) else { throw APIError.unauthorized("the account is gone") }
        return Account(details)
    }

    func update(_ account: String, _ request: Request, _ context: AuthenticatedContext) async throws -> Account {
        let changes = try AccountChanges(try await JSONBody.read(request, context: context))
        let update = changes.update
        guard update != AccountUpdate() else {
            throw APIError.unprocessable(
                "nothing to update: send trello_api_key, trello_token, trello_webhook_secret, conflict_policy, delete_mode or time_zone")
        }
        guard let details = try await store.updateAccount(id: account, update) else { throw APIError.unauthorized("the account is gone") }
        if update.trelloWebhookSecret != nil {
            do {
                // The secret as the store has it now: a concurrent update's publication cannot be overwritten by ours.
                try await RoutePublisher.publishSecret(account: account, store: store, redis: signals.redis, keys: signals.keys)
            } catch {
                // Saved, but the ingress does not know yet; repeating the request is safe.
                throw APIError.unavailable("saved, but the webhook receiver could not be told (Redis unreachable); repeat the request")
            }
        }
        return Account(details)
    }

    /// A new token; the old one stops working at once on every API process (`TokenCache`): if Redis cannot be told,
    /// nothing changes (503, repeat the request).
    func rotateToken(_ account: String, oldTokenHash: String?) async throws -> AccountToken {
        let token = AuthenticationMiddleware.newToken()
        let tokenHash = AuthenticationMiddleware.hash(token)
        try await revokingTokens(account) {
            try await store.rotateToken(accountID: account, newTokenHash: tokenHash)
        }
        await throttle.accepted(tokenHash)
        if let oldTokenHash { await throttle.forgetAccepted(oldTokenHash) }
        logger.info("token rotated", metadata: ["account": "\(account)"])
        return AccountToken(accountID: account, authToken: token)
    }

    /// Runs `change`, which revokes the account's token in the store, between two advances of its token epoch
    /// (`TokenCache.revoke`): the first stops it when Redis cannot be told (503, nothing changed); the second, made
    /// whether `change` succeeded or not (a statement can commit after its deadline gave up), catches a lookup that ran
    /// while the store still had the token.
    func revokingTokens<T>(_ account: String, _ change: () async throws -> T) async throws -> T {
        do {
            try await signals.tokens.revoke(account: account)
        } catch {
            logger.warning("token revocation postponed: redis unavailable", metadata: ["account": "\(account)", "error": "\(error)"])
            throw APIError.unavailable(
                "the token could not be revoked now (Redis unreachable or refusing writes); nothing was changed, repeat the request")
        }
        return try await revoking(account, change)
    }

    /// Runs `change` (the store's part of a revocation), then the second advance of the account's token epoch,
    /// whether `change` succeeded or not: if Redis cannot be told now, every process still looks the token up again
    /// within `TokenCache.lifetime`.
    func revoking<T>(_ account: String, _ change: () async throws -> T) async throws -> T {
        let result: Result<T, any Error>
        do { result = .success(try await change()) } catch { result = .failure(error) }
        do {
            try await signals.tokens.revoke(account: account)
        } catch {
            logger.warning("token epoch not advanced after a revocation", metadata: ["account": "\(account)", "error": "\(error)"])
        }
        await signals.endStreams(account)
        return try result.get()
    }

    /// Deletes the account and everything of it: first the ingress's view of it in Redis (secret, callback token,
    /// routes, and a tombstone against republication), then its webhooks at Trello (those Trello would not delete are
    /// logged and counted, never a reason to keep the account), then its rows, then whatever Redis still names it.
    /// Only Redis being unreachable at the start stops it (503: nothing was deleted, repeat the request).
    func delete(_ account: String, tokenHash: String?) async throws -> HTTPResponse.Status {
        let lists = try await store.syncLists(accountID: account)
        let devices = try await store.devices(accountID: account).map(\.deviceID)
        let credentials = try await store.accountDetails(id: account).flatMap(API.credentials)
        let models = Set(lists.flatMap { [$0.trelloListID, $0.trelloBoardID] })
        // The ingress stops accepting the account's webhooks first, and every API process will look the token up
        // again (`TokenCache`); if Redis cannot be told, the account stays whole.
        do {
            try await signals.tokens.revoke(account: account)
            try await RoutePublisher.removeAccount(account: account, models: models.sorted(), redis: signals.redis, keys: signals.keys)
        } catch {
            logger.warning("account deletion postponed: redis unreachable", metadata: ["account": "\(account)", "error": "\(error)"])
            throw APIError.unavailable("the account could not be deleted now (Redis unreachable); nothing was deleted, repeat the request")
        }
        await webhooks.unregister(
            Set(lists.flatMap { [$0.listWebhookID, $0.boardWebhookID].compactMap { $0 } }), credentials: credentials, account: account)
        // Its token's epoch advances again after the rows are gone, and the purge below then removes it.
        let removed = try await revoking(account) { try await store.deleteAccount(id: account) }
        await purge.purgeRedis(
            account: account, models: models.union(removed.flatMap { [$0.trelloListID, $0.trelloBoardID] }), devices: devices,
            tokenHash: tokenHash)
        logger.info("account deleted", metadata: ["account": "\(account)"])
        return .noContent
    }
}
