public import Foundation

/// A date without a time, `YYYY-MM-DD`: the due or start date of an all-day reminder (Reminders' "date" without
/// "time"). Trello holds only instants, so the server writes `instant(in:)` for it and remembers the day
/// (`FieldStamps.dayDateKey`), giving the day back to the apps for as long as the card holds that instant.
public struct DayDate: Sendable, Hashable, CustomStringConvertible {
    public let year: Int
    public let month: Int
    public let day: Int

    /// Exactly `YYYY-MM-DD`, a day that exists (no February 30th), years 1000 to 9999.
    public init?(_ text: String) {
        let u = Array(text.utf8)
        guard u.count == 10, u[4] == UInt8(ascii: "-"), u[7] == UInt8(ascii: "-") else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for i in range {
                guard u[i] >= UInt8(ascii: "0"), u[i] <= UInt8(ascii: "9") else { return nil }
                value = value * 10 + Int(u[i] - UInt8(ascii: "0"))
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10), year >= 1000, (1...12).contains(month),
            day >= 1, day <= Timestamp.daysIn(month: month, year: year)
        else { return nil }
        self.year = year
        self.month = month
        self.day = day
    }

    public var description: String {
        func pad(_ n: Int, _ width: Int) -> String { String(repeating: "0", count: max(0, width - String(n).count)) + String(n) }
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))"
    }

    /// The instant written to Trello for this day: noon of the day in `zone`. Trello shows it as this day to anyone
    /// within eleven hours of the zone, and a noon never falls in a daylight-saving gap.
    public func instant(in zone: TimeZone) -> Date {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        let components = DateComponents(year: year, month: month, day: day, hour: 12)
        return calendar.date(from: components) ?? Date(timeIntervalSince1970: 0)
    }
}

/// The IANA time zone an account's all-day dates are written in (`PUT /dailyroundup/account` `time_zone`; UTC when
/// never set).
public struct AccountTimeZone: Sendable, Hashable, RawRepresentable, CustomStringConvertible {
    public let rawValue: String

    /// An IANA name Foundation knows (`Europe/Berlin`, `America/Los_Angeles`, `UTC`); anything else is nil.
    public init?(rawValue: String) {
        guard !rawValue.isEmpty, rawValue.utf8.count <= 64,
            rawValue == "UTC" || TimeZone.knownTimeZoneIdentifiers.contains(rawValue), TimeZone(identifier: rawValue) != nil
        else { return nil }
        self.rawValue = rawValue
    }

    /// A name read back from the store, as stored: checked when it was set, by the API process. A process whose time
    /// zone data lacks it (older or trimmed tzdata) still reads the account, and writes its dates in UTC (`zone`).
    public init(stored name: String) { rawValue = name }

    public static let utc = AccountTimeZone(rawValue: "UTC")!

    public var zone: TimeZone { TimeZone(identifier: rawValue) ?? TimeZone(secondsFromGMT: 0)! }
    public var description: String { rawValue }
}
