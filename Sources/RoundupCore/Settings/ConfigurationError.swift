/// A configuration key that could not be used, named so the operator knows what to fix.
package struct ConfigurationError: Error, CustomStringConvertible, Sendable {
    package var key: String
    package var problem: String
    package init(key: String, problem: String) {
        self.key = key
        self.problem = problem
    }
    package var description: String { "configuration: \(key) \(problem)" }
}
