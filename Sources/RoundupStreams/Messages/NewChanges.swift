public import RoundupCore
public import RoundupRedis

/// What every writer of pending changes appends once the store has them: a background push for the account's
/// devices (roundup-pusher coalesces them per device, and skips a device that holds an open change stream) and a
/// `ChangeAnnouncement` that wakes the account's open change streams on every API process.
public enum NewChanges {
    /// `trace`: the context of the work that made the changes (tracing on), which the push and the announcement carry.
    public static func appends(
        account: String, reason: PushRequest.Reason, excludeDevice: String? = nil, keys: RedisKeys, trace: TraceHeaders? = nil
    ) -> [StreamAppend] {
        [
            StreamAppend(
                stream: keys.pushStream, maxLength: PushRequest.streamMaxLength,
                fields: PushRequest.background(account: account, reason: reason, excludeDevice: excludeDevice, trace: trace).fields),
            StreamAppend(
                stream: keys.changeAnnouncements, maxLength: ChangeAnnouncement.streamMaxLength,
                fields: ChangeAnnouncement(account: account, trace: trace).fields),
        ]
    }

    /// The same appends as one pipeline's commands.
    public static func commands(account: String, reason: PushRequest.Reason, excludeDevice: String? = nil, keys: RedisKeys) -> [RedisCommand] {
        appends(account: account, reason: reason, excludeDevice: excludeDevice, keys: keys).map(\.command)
    }
}
