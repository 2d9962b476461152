import unittest

from app import greeting


class GreetingTest(unittest.TestCase):
    def test_it_greets_by_name(self) -> None:
        self.assertEqual(greeting("Ada"), "Hello, Ada!")

    def test_it_greets_the_world_by_default(self) -> None:
        self.assertEqual(greeting(""), "Hello, world!")


if __name__ == "__main__":
    unittest.main()
