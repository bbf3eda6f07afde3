import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStreams

/// Publishing in order. Several processes write the ingress's view of an account (the API when a secret, a list or the
/// account changes; every worker at start-up; `roundupctl routes sync`), each from what it read in the store a moment
/// before. Without an order, a worker that read the store just before the API changed a secret writes the old secret
/// back after the API wrote the new one, and one that read an account just before it was deleted restores it.
///
/// The order: every publisher takes a version (an `INCR` of `{prefix}{routing}:epoch`) *before* it reads the store, and
/// writes each item (a secret, a token, an account in a model's route set) only if no write with a higher version
/// reached that item. Among the writes of one item, the highest version wins whatever order they arrive in, and the
/// highest version was taken last, so its read of the store came after every commit whose own publication took a
/// lower version: Redis ends with what the store said last. A deleted account leaves a tombstone that refuses every
/// later addition for it (account ids are never reused), however old the read behind that addition was.
///
/// The versions live per account in `{prefix}{routing}:versions:{account}` (a hash: item → version, and `deleted`),
/// which expires a day after its last write: long after any publisher that read the store before it could still
/// write. The keys the ingress reads (`webhook-secrets`, `webhook-tokens`, `route:{model}`) do not change.
enum RoutingWrites {
    /// How long the versions of an account (and its tombstone) are kept after their last write.
    static let versionTTLSeconds = 86_400
    /// Writes per script call: a worker's publication of every account runs in slices, so Redis never stalls on one.
    static let sliceSize = 256

    /// One item the ingress reads, written or removed.
    struct Write: Sendable, Equatable {
        enum Operation: String, Sendable {
            case hashSet = "hset", hashDelete = "hdel", setAdd = "sadd", setRemove = "srem"
            /// The account is deleted: additions for it are refused from now on.
            case tombstone = "tomb"
        }

        var account: String
        var operation: Operation
        /// The hash or set written (unused by `tombstone`).
        var key: String
        /// The hash field or set member.
        var member: String
        var value: String = ""
        /// The item's field in the account's version hash.
        var item: String

        static func secret(_ account: String, _ secret: String?, keys: RedisKeys) -> Write {
            Write(
                account: account, operation: secret == nil ? .hashDelete : .hashSet, key: keys.webhookSecrets, member: account, value: secret ?? "",
                item: "secret")
        }

        static func token(_ account: String, _ token: String?, keys: RedisKeys) -> Write {
            Write(
                account: account, operation: token == nil ? .hashDelete : .hashSet, key: keys.webhookTokens, member: account, value: token ?? "",
                item: "token")
        }

        static func route(_ account: String, model: String, present: Bool, keys: RedisKeys) -> Write {
            Write(account: account, operation: present ? .setAdd : .setRemove, key: keys.modelRoute(model), member: account, item: "route:" + model)
        }

        static func tombstone(_ account: String, keys: RedisKeys) -> Write {
            Write(account: account, operation: .tombstone, key: keys.routingVersions(account: account), member: "", item: "deleted")
        }
    }

    /// What one publication did: items written, and items left alone because a newer publication (or the account's
    /// deletion) got there first.
    struct Outcome: Sendable, Equatable {
        var written = 0
        var skipped = 0
    }

    /// A new version; take it before reading the store.
    static func nextVersion(redis: RedisClient, keys: RedisKeys) async throws -> Int {
        let reply = try await redis.send(RedisCommand("INCR", [RedisArgument(keys.routingEpoch)]))
        guard let version = reply.int else { throw RedisClientError(.server, "publishing routes: INCR answered \(reply)") }
        return version
    }

    /// Applies `writes` with `version`, in slices; each slice is all-or-nothing (a Redis at its maxmemory refuses it whole).
    static func apply(_ writes: [Write], version: Int, redis: RedisClient, keys: RedisKeys) async throws -> Outcome {
        var outcome = Outcome()
        var start = 0
        while start < writes.count {
            let slice = writes[start..<min(start + sliceSize, writes.count)]
            start += sliceSize
            var keyList = [keys.routingEpoch]
            var keyIndex: [String: Int] = [keys.routingEpoch: 1]
            func index(_ key: String) -> Int {
                if let known = keyIndex[key] { return known }
                keyList.append(key)
                keyIndex[key] = keyList.count
                return keyList.count
            }
            var arguments = [RedisArgument(version), RedisArgument(versionTTLSeconds)]
            for write in slice {
                let versions = index(keys.routingVersions(account: write.account))
                let target = write.operation == .tombstone ? versions : index(write.key)
                arguments += [
                    RedisArgument(write.operation.rawValue), RedisArgument(versions), RedisArgument(write.item), RedisArgument(target),
                    RedisArgument(write.member), RedisArgument(write.value),
                ]
            }
            let reply = try await redis.evaluate(script, keys: keyList.map { RedisArgument($0) }, arguments: arguments)
            guard let counts = reply.array, counts.count == 2, let written = counts[0].int, let skipped = counts[1].int else {
                throw RedisClientError(.server, "publishing routes: the script answered \(reply)")
            }
            outcome.written += written
            outcome.skipped += skipped
        }
        return outcome
    }

    /// The `#!lua` line declares a script that writes, so a Redis at its maxmemory refuses it before it runs.
    static let script = RedisScript(
        name: "routing-publish",
        source: """
            #!lua
            -- KEYS[1]: the version counter; KEYS[2..]: the keys the writes name.
            -- ARGV[1]: this publication's version, ARGV[2]: TTL of the version hashes (seconds), then six per write:
            -- operation, KEYS index of the account's version hash, item, KEYS index of the target, member, value.
            local version = tonumber(ARGV[1])
            local ttl = tonumber(ARGV[2])
            local epoch = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
            local written, skipped = 0, 0
            for i = 3, #ARGV, 6 do
              local op = ARGV[i]
              local versions = KEYS[tonumber(ARGV[i + 1])]
              local item = ARGV[i + 2]
              local target = KEYS[tonumber(ARGV[i + 3])]
              local member = ARGV[i + 4]
              local deleted = redis.call('HEXISTS', versions, 'deleted') == 1
              local current = tonumber(redis.call('HGET', versions, item) or '0') or 0
              -- Every version was taken from the counter: one above it outlived a lost counter and orders nothing.
              if current > epoch then current = 0 end
              local removal = op == 'hdel' or op == 'srem' or op == 'tomb'
              if (deleted and not removal) or (not deleted and version <= current) then
                skipped = skipped + 1
              else
                if op == 'hset' then
                  redis.call('HSET', target, member, ARGV[i + 5])
                elseif op == 'hdel' then
                  redis.call('HDEL', target, member)
                elseif op == 'sadd' then
                  redis.call('SADD', target, member)
                elseif op == 'srem' then
                  redis.call('SREM', target, member)
                end
                if not deleted or op == 'tomb' then
                  redis.call('HSET', versions, item, version)
                end
                redis.call('EXPIRE', versions, ttl)
                written = written + 1
              end
            end
            return {written, skipped}
            """)
}
