def main():
    print("placeholder")
