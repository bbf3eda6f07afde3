import Foundation
import Hummingbird
import Logging
import Metrics
import RoundupCore
import RoundupRedis
import RoundupRouting
import RoundupStore
import RoundupTrello

extension API {
    func createAccount(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        guard let bootstrap = options.bootstrapToken else {
            throw APIError.forbidden("account creation is off: the server has no ROUNDUP_BOOTSTRAP_TOKEN")
        }
        guard let given = Self.bearerToken(request) else { throw APIError.unauthorized("account creation needs the bootstrap token as Bearer") }
        // Guessing the bootstrap token counts against the address like a bad account token; an address over its
        // budget creates nothing, whatever it sends.
        let givenHash = Self.hash(given)
        let attempt = AuthThrottle.Attempt(.bootstrap, request: request, context: context, tokenHash: givenHash)
        let refused = APIError.unauthorized("account creation needs the bootstrap token as Bearer")
        try await throttle.check(attempt, unauthorized: refused)
        guard constantTimeEquals(Array(givenHash.utf8), Array(Self.hash(bootstrap).utf8)) else {
            await throttle.record(.bootstrap, attempt)
            throw refused
        }
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
        if update.trelloWebhookSecret != nil {
            do {
                // The secret as the store has it now: a concurrent update's publication cannot be overwritten by ours.
                try await RoutePublisher.publishSecret(account: account, store: store, redis: redis, keys: options.keys)
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

    /// Deletes the account and everything of it: first the ingress's view of it in Redis (secret, callback token,
    /// routes, and a tombstone against republication), then its webhooks at Trello (those Trello would not delete are
    /// logged and counted, never a reason to keep the account), then its rows, then whatever Redis still names it.
    /// Only Redis being unreachable at the start stops it (503: nothing was deleted, repeat the request).
    func deleteAccount(_ account: String) async throws -> Response {
        let lists = try await store.syncLists(accountID: account)
        let devices = try await store.devices(accountID: account).map(\.deviceID)
        let credentials = try await store.accountDetails(id: account).flatMap(Self.credentials)
        let models = Set(lists.flatMap { [$0.trelloListID, $0.trelloBoardID] })
        // The ingress stops accepting the account's webhooks first; if Redis cannot be told, the account stays whole.
        do {
            try await RoutePublisher.removeAccount(account: account, models: models.sorted(), redis: redis, keys: options.keys)
        } catch {
            logger.warning("account deletion postponed: redis unreachable", metadata: ["account": "\(account)", "error": "\(error)"])
            throw APIError.unavailable("the account could not be deleted now (Redis unreachable); nothing was deleted, repeat the request")
        }
        await deleteWebhooks(Set(lists.flatMap { [$0.listWebhookID, $0.boardWebhookID].compactMap { $0 } }), credentials: credentials, account: account)
        let removed = try await store.deleteAccount(id: account)
        await purgeRedis(account: account, models: models.union(removed.flatMap { [$0.trelloListID, $0.trelloBoardID] }), devices: devices)
        logger.info("account deleted", metadata: ["account": "\(account)"])
        return Response(status: .noContent)
    }

    static func credentials(_ details: AccountDetails) -> TrelloCredentialsValue? {
        guard let key = details.trelloAPIKey, let token = details.trelloToken else { return nil }
        return TrelloCredentialsValue(apiKey: key, token: token)
    }

    /// Deletes webhooks at Trello and never fails the caller: a deletion must not depend on Trello. Already gone (404)
    /// counts as deleted. At the first refusal (401/403: the user revoked the token; another 4xx) or failure (Trello
    /// unreachable or failing after a retry) the rest is not tried: every id not deleted may remain at Trello, and is
    /// logged (`webhooks may remain at trello`, ids in metadata) and counted (`roundup_webhooks_orphaned_total{reason}`).
    /// Such a webhook keeps calling a URL that no longer routes anywhere; Trello deactivates it after its failures.
    func deleteWebhooks(_ ids: Set<String>, credentials: TrelloCredentialsValue?, account: String, syncList: String? = nil) async {
        var remaining = ids.sorted()
        guard !remaining.isEmpty else { return }
        var reason = "no_credentials"
        var detail = "the account has no trello_api_key or trello_token"
        if let credentials {
            let client = trello.with(maxAttempts: 2)
            while let id = remaining.first {
                do {
                    try await client.deleteWebhook(id: id, credentials: credentials)
                    remaining.removeFirst()
                } catch let error as TrelloError {
                    reason = error.status == 401 || error.status == 403 ? "revoked" : error.isTransient ? "unreachable" : "refused"
                    detail = error.description
                    break
                } catch {
                    reason = "unreachable"
                    detail = TrelloClient.describe(error)
                    break
                }
            }
        }
        guard !remaining.isEmpty else { return }
        Counter(label: "roundup_webhooks_orphaned_total", dimensions: [("reason", reason)]).increment(by: remaining.count)
        var metadata: Logger.Metadata = [
            "account": "\(account)", "webhooks": "\(remaining.joined(separator: ","))", "reason": "\(reason)", "error": "\(detail)",
        ]
        if let syncList { metadata["sync_list"] = "\(syncList)" }
        logger.warning("webhooks may remain at trello", metadata: metadata)
    }

    /// `text` as a glob pattern (SCAN MATCH) that matches it literally.
    static func globEscaped(_ text: String) -> String {
        var out = ""
        for character in text {
            if "*?[]\\".contains(character) { out.append("\\") }
            out.append(character)
        }
        return out
    }

    /// Removes dead letters of one account, a page at a time, inside Redis (their bodies never travel).
    static let purgeDeadLetters = RedisScript(
        name: "purge-dead-letters",
        source: """
            -- KEYS[1]: dead-letter stream; ARGV[1]: account, ARGV[2]: start (an id, "(id" or "-"), ARGV[3]: page size
            -- Returns {removed, last id read ("" at the end)}.
            local entries = redis.call('XRANGE', KEYS[1], ARGV[2], '+', 'COUNT', ARGV[3])
            local removed = 0
            for _, entry in ipairs(entries) do
                local fields = entry[2]
                for i = 1, #fields, 2 do
                    if fields[i] == 'account' then
                        if fields[i + 1] == ARGV[1] then
                            redis.call('XDEL', KEYS[1], entry[1])
                            removed = removed + 1
                        end
                        break
                    end
                end
            end
            local last = ''
            if #entries > 0 then last = entries[#entries][1] end
            return {removed, last}
            """)

    /// After the account's rows are gone: its routes, secret and callback token once more (a worker publishing routes
    /// at start-up may have written them back meanwhile), pending pushes, and every key and dead letter naming it.
    /// Best effort: what is left expires by itself (dedupe marks within ROUNDUP_DEDUPE_TTL_SECONDS, the rest within
    /// minutes) except dead letters, which age out with the dead-letter retention; a failure is logged.
    func purgeRedis(account: String, models: Set<String>, devices: [String]) async {
        let keys = options.keys
        do {
            try await RoutePublisher.removeAccount(account: account, models: models.sorted(), redis: redis, keys: keys)
            var commands: [RedisCommand] = []
            let minute = Self.currentMinute()
            commands.append(RedisCommand("DEL", (minute - 3...minute + 1).map { RedisArgument(Self.rateKey(keys, account: account, minute: $0)) }))
            if !devices.isEmpty {
                commands.append(RedisCommand("ZREM", [RedisArgument(keys.deferredPushes)] + devices.map { RedisArgument(account + "|" + $0) }))
                commands.append(RedisCommand("DEL", devices.map { RedisArgument(keys.recentPush(account: account, device: $0)) }))
            }
            let replies = try await redis.pipeline(commands, timeout: .seconds(2))
            if let failure = replies.first(where: { if case .error = $0 { return true } else { return false } }) {
                throw RedisClientError(.server, "purging the account: \(failure)")
            }
            // Keys named after the account, wherever they are; a bounded number of rounds (they expire anyway).
            let pattern = Self.globEscaped(keys.prefix) + "*:" + Self.globEscaped(account) + ":*"
            var cursor = "0"
            var rounds = 0
            repeat {
                let reply = try await redis.send(RedisCommand("SCAN", [RedisArgument(cursor), "MATCH", RedisArgument(pattern), "COUNT", 1000]), timeout: .seconds(2))
                guard let parts = reply.array, parts.count == 2, let next = parts[0].string else {
                    throw RedisClientError(.server, "purging the account: SCAN answered \(reply)")
                }
                let found = (parts[1].array ?? []).compactMap(\.string)
                if !found.isEmpty { _ = try await redis.send(RedisCommand("UNLINK", found.map { RedisArgument($0) }), timeout: .seconds(2)) }
                cursor = next
                rounds += 1
            } while cursor != "0" && rounds < 2_000
            if cursor != "0" { logger.notice("account keys left to expire", metadata: ["account": "\(account)"]) }
            var start = "-"
            rounds = 0
            while rounds < 1_000 {
                let reply = try await redis.evaluate(
                    Self.purgeDeadLetters, keys: [RedisArgument(keys.deadLetterStream)], arguments: [RedisArgument(account), RedisArgument(start), 500],
                    timeout: .seconds(2))
                guard let last = reply.array?.last?.string, !last.isEmpty else { break }
                start = "(" + last
                rounds += 1
            }
        } catch {
            logger.warning("account redis cleanup incomplete", metadata: ["account": "\(account)", "error": "\(error)"])
        }
    }
}
