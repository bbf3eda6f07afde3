import Foundation
import Logging
import Metrics
import NIOCore
import RoundupCore
import RoundupJobs
import RoundupRedis
import RoundupStore
import RoundupStreams
import RoundupTrello

extension API {
    /// The account's Trello key and token, when it has both.
    static func credentials(_ details: AccountDetails) -> TrelloCredentials? {
        guard let key = details.trelloAPIKey, let token = details.trelloToken else { return nil }
        return TrelloCredentials(apiKey: key, token: token)
    }
}

/// What deleting an account leaves to clean in Redis (its webhooks at Trello are `WebhookRegistrar.unregister`'s).
struct AccountPurge: Sendable {
    let redis: RedisClient
    let keys: RedisKeys
    let logger: Logger

    /// `text` as a glob pattern (SCAN MATCH) that matches it literally.
    static func globEscaped(_ text: String) -> String {
        var out = ""
        for character in text {
            if "*?[]\\".contains(character) { out.append("\\") }
            out.append(character)
        }
        return out
    }

    /// Removes the entries of a stream that name one account (`account` field: dead letters, change announcements), a
    /// page at a time, inside Redis (their bodies never travel).
    static let purgeAccountEntries = RedisScript(
        name: "purge-account-entries",
        source: """
            -- KEYS[1]: a stream whose entries have an account field; ARGV[1]: account, ARGV[2]: start (an id, "(id" or "-"), ARGV[3]: page size
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
    func purgeRedis(account: String, models: Set<String>, devices: [String], tokenHash: String?) async {
        do {
            try await RoutePublisher.removeAccount(account: account, models: models.sorted(), redis: redis, keys: keys)
            // One DEL per hash tag: in a cluster a command names keys of one slot only.
            var commands: [RedisCommand] = []
            let minute = RateLimit.currentMinute()
            // Its request counts and token epoch (in its own slot, `{a:<account>}`).
            commands.append(
                RedisCommand(
                    "DEL",
                    (minute - 3...minute + 1).map { RedisArgument(RateLimit.key(keys, account: account, minute: $0)) }
                        + [RedisArgument(keys.authEpoch(account: account))]))
            // Its streams' marks and places, and the throttle's note of its token.
            var named = [keys.streamingDevices(account: account)]
            named += [AccountLeases.Kind.streams, .exports].map { keys.accountLeases(account: account, kind: $0.rawValue) }
            commands.append(RedisCommand("DEL", named.map { RedisArgument($0) }))
            if let tokenHash { commands.append(RedisCommand("DEL", [RedisArgument(keys.acceptedToken(tokenHash))])) }
            if !devices.isEmpty {
                commands.append(RedisCommand("ZREM", [RedisArgument(keys.deferredPushes)] + devices.map { RedisArgument(account + "|" + $0) }))
                commands.append(RedisCommand("DEL", devices.map { RedisArgument(keys.recentPush(account: account, device: $0)) }))
            }
            // Its counts in its webhook shard's load (events still waiting there lower them as they leave, and a field
            // that falls to zero is removed).
            let loadShard = WebhookShard(account: account)
            commands.append(
                RedisCommand("HDEL", [RedisArgument(keys.webhookLoad(loadShard))] + ["n:", "b:", "r:"].map { RedisArgument($0 + account) }))
            // An operator's pause of it: its entries still waiting are dropped by the workers once it is gone.
            commands.append(RedisCommand("HDEL", [RedisArgument(keys.pausedStreams), RedisArgument(StreamPauses.accountField + account)]))
            let replies = try await redis.pipeline(commands, timeout: .seconds(2))
            if let failure = replies.lazy.compactMap(\.errorReply).first {
                throw RedisClientError.reply(failure, answering: "purging the account")
            }
            // Its echo fingerprints and dedupe marks: each family shares a hash tag, so it is walked on the one node
            // serving that slot, never across a cluster; a bounded number of pages (they expire anyway).
            let shard = WebhookShard(account: account)
            for start in [keys.echoPrefix(account: account), keys.seenPrefix(account: account)] {
                let finished = try await redis.scan(
                    matching: Self.globEscaped(start) + "*", onNodeServing: start, maxPages: 2_000, timeout: .seconds(2)
                ) {
                    found in
                    _ = try await redis.send(RedisCommand("UNLINK", found.map { RedisArgument($0) }), timeout: .seconds(2))
                }
                if !finished { logger.notice("account keys left to expire", metadata: ["account": "\(account)"]) }
            }
            // Its dead letters (its webhook shard's, the job and push streams'), and the announcements that name it
            // (the last one woke its streams to end them).
            for stream in [keys.deadLetterStream(shard), keys.jobDeadLetters, keys.pushDeadLetters, keys.changeAnnouncements] {
                var start = "-"
                var rounds = 0
                while rounds < 1_000 {
                    let reply = try await redis.evaluate(
                        Self.purgeAccountEntries, keys: [RedisArgument(stream)], arguments: [RedisArgument(account), RedisArgument(start), 500],
                        timeout: .seconds(2))
                    guard let last = reply.array?.last?.string, !last.isEmpty else { break }
                    start = "(" + last
                    rounds += 1
                }
            }
        } catch {
            logger.warning("account redis cleanup incomplete", metadata: ["account": "\(account)", "error": "\(error)"])
        }
    }
}
