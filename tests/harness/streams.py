"""A text stream that keeps what is written: stdout, stderr or both as one terminal."""


class TextSink:
    def __init__(self):
        self.text = ""

    def write(self, text):
        self.text += text

    def flush(self):
        pass
