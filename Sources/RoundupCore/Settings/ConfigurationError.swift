/// A configuration key that could not be used, named so the operator knows what to fix.
public struct ConfigurationError: Error, CustomStringConvertible, Sendable {
    public var key: String
    public var problem: String
    public init(key: String, problem: String) {
        self.key = key
        self.problem = problem
    }
    public var description: String { "configuration: \(key) \(problem)" }
}
