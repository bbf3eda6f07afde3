public import Foundation

/// A device's hold on the changes it pulls (`GET /dailyroundup/changes?device_id=`): the changes it is given are its
/// own until `until`, so another device of the account (an iPhone and a Mac on one iCloud account) does not apply
/// them too. The same device pulling again is given them again; another device gets them once the hold lapses (the
/// first device vanished) or is given back (`ChangeFeed.releaseClaims`); the ack ends it.
public struct ChangeClaim: Sendable, Equatable {
    public var deviceID: String
    /// Now and the end of the hold, in milliseconds since 1970: a hold whose end is not after `now` has lapsed.
    public var now: Int64
    public var until: Int64
    /// The highest change id the read may give (a stream's sweep of the changes below its place); `Int64.max`: none.
    public var throughID: Int64
    /// Whether the device's own live holds are given again (a pull: yes; a stream's sweep: no, it sent them already).
    public var includeOwn: Bool

    public init(deviceID: String, now: Date = Date(), holdFor: TimeInterval, throughID: Int64 = .max, includeOwn: Bool = true) {
        self.deviceID = deviceID
        self.now = Self.milliseconds(now)
        self.until = Self.milliseconds(now.addingTimeInterval(holdFor))
        self.throughID = throughID
        self.includeOwn = includeOwn
    }

    public static func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded(.down)) }

    /// When the hold ends, as the API writes times.
    public var untilDate: Date { Date(timeIntervalSince1970: Double(until) / 1000) }
}
