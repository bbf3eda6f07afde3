public import Foundation

/// Timestamps are stored as ISO 8601 text (UTC, milliseconds), which sorts as time does.
public enum Timestamp {
    static let style = Date.ISO8601FormatStyle(includingFractionalSeconds: true)

    public static func now() -> String { string(Date()) }

    public static func string(_ date: Date) -> String { style.format(date) }

    public static func date(_ string: String) -> Date? {
        if let fast = fastParse(string) { return fast }
        // The fast form with an impossible date: not for a lenient parser to roll over.
        let u = Array(string.utf8)
        if u.count >= 20, u.last == UInt8(ascii: "Z"), u[4] == 0x2D, u[7] == 0x2D, u[10] == UInt8(ascii: "T") { return nil }
        if let d = try? style.parse(string) { return d }
        return try? Date.ISO8601FormatStyle().parse(string)
    }

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    /// `YYYY-MM-DDTHH:MM:SS[.fff]Z`, the form Trello and this server write, without a formatter. An impossible date
    /// (February 31st, second 60) is nil rather than rolled over into the next month or minute.
    public static func fastParse(_ string: String) -> Date? {
        let u = Array(string.utf8)
        guard u.count >= 20, u.last == UInt8(ascii: "Z"), u[4] == 0x2D, u[7] == 0x2D, u[10] == UInt8(ascii: "T"), u[13] == 0x3A, u[16] == 0x3A else {
            return nil
        }
        func number(_ range: Range<Int>) -> Int? {
            var n = 0
            for i in range {
                guard u[i] >= 0x30, u[i] <= 0x39 else { return nil }
                n = n * 10 + Int(u[i] - 0x30)
            }
            return n
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10), let hour = number(11..<13),
            let minute = number(14..<16), let second = number(17..<19), (1...12).contains(month), day >= 1,
            day <= Self.daysIn(month: month, year: year), hour < 24, minute < 60, second < 60
        else { return nil }
        var fraction = 0.0
        if u.count > 20 {
            // At most nanoseconds: longer fractions are not ours to parse (and would overflow).
            guard u[19] == UInt8(ascii: "."), u.count > 21, u.count <= 30, let digits = number(20..<(u.count - 1)) else { return nil }
            fraction = Double(digits) / pow(10, Double(u.count - 21))
        } else if u.count != 20 {
            return nil
        }
        // Days from the civil date (Howard Hinnant's algorithm), so no calendar object is needed.
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146_097 + doe - 719_468
        let seconds = Double(days * 86_400 + hour * 3_600 + minute * 60 + second) + fraction
        return Date(timeIntervalSince1970: seconds)
    }
}
